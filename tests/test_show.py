"""Rendering a report from its dict: the parts of T as the budget gives them, time by
phase, and `gobrrr show REPORT.json` (a saved report rendered as doctor renders it).

Reports here: the saved 2-GPU DDP report (benchmarks/results/h200x2/ddp_comm.json,
schema 1.4, saved before the budget carried total_s and parts_s), analyze's reports of
two H200 traces (tests/data/traces: a training step and a forward-only call; no H200
calibration is cached, so their ceilings are the datasheet's and their numbers fixed),
and one live CPU doctor run.
"""

import copy
import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from click.testing import CliRunner

from gobrrr.analyze import analyze
from gobrrr.cli import cli
from gobrrr.show import render_report
from gobrrr.show.budget_view import budget_parts, phase_rows
from gobrrr.show.terminal import _budget_bar, print_report

ROOT = Path(__file__).parents[1]
DDP = ROOT / "benchmarks" / "results" / "h200x2" / "ddp_comm.json"
TRACES = Path(__file__).parent / "data" / "traces"


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERMINAL_WIDTH", "100")


def terminal(d):
    buf = io.StringIO()
    with redirect_stdout(buf):
        print_report(d)
    return buf.getvalue()


# ---------------------------------------------------------------- the parts of T


def test_budget_parts_are_the_budgets_own():
    # A budget that carries them: returned as they are, never re-added (the sum of
    # these parts is 3 ms; the budget's T says 5 ms, and T is what is shown).
    b = {"total_s": 5e-3, "parts_s": {"overhead": 1e-3, "memory": 1e-3, "compute": 1e-3},
         "overhead_s": 9.0, "memory_s": 9.0, "compute_s": 9.0,
         "fractions": {"overhead": 0.2, "memory": 0.2, "compute": 0.2}}
    assert budget_parts(b) == (5e-3, {"overhead": 1e-3, "memory": 1e-3, "compute": 1e-3})


def test_budget_parts_of_a_report_saved_before_them():
    b = json.loads(DDP.read_text())["budget"]
    assert "parts_s" not in b and "total_s" not in b
    total_s, parts_s = budget_parts(b)
    # the four its fractions name: 0 + 3.0075 + 0 + 3.9063 ms = 6.9137 ms = its T_wall
    assert parts_s == {"overhead": 0.0, "memory": 0.0030074730608953765, "compute": 0.0,
                       "communication": 0.0039062509391049665}
    assert total_s == b["wall_s"] == 0.006913724000000343


# ---------------------------------------------------------------- time by phase


@pytest.fixture(scope="module")
def train_step():
    """analyze's report of an H200 MLP training step (forward, backward, AdamW)."""
    return analyze([TRACES / "mlp_train_step.json.gz"]).to_dict()


@pytest.fixture(scope="module")
def forward_only():
    """analyze's report of an H200 MLP forward call: one phase."""
    return analyze([TRACES / "mlp_b1_forward.json.gz"]).to_dict()


def test_phase_rows_only_for_several_phases(train_step, forward_only):
    assert [(r["name"], r["calls"]) for r in phase_rows(train_step["budget"])] == [
        ("optimizer", 27), ("backward", 43), ("forward", 14)]
    # every op call is in one phase: 27 + 43 + 14 = 84 calls, all the per-op rows' calls
    assert 27 + 43 + 14 == sum(r["calls"] for r in train_step["budget"]["per_op"])
    assert [r["name"] for r in forward_only["budget"]["per_phase"]] == ["forward"]
    assert phase_rows(forward_only["budget"]) == []
    older = copy.deepcopy(train_step["budget"])
    del older["per_phase"]  # a report saved before per_phase: no table
    assert phase_rows(older) == []


def test_terminal_prints_time_by_phase_for_a_training_step(train_step, forward_only):
    out = terminal(train_step)
    table = out[out.index("time by phase"):out.index("top ops")]
    rows = [[c.strip() for c in line.split("│")] for line in table.splitlines()
            if "│" in line]
    # % of T = phase time / T (3.18 ms): 74.5 / 3176 = 2.3%, 59.3 / 3176 = 1.9%,
    # 50.1 / 3176 = 1.6%; each phase's bound is its own (the step is overhead-bound)
    assert rows == [["optimizer", "27", "74.5 us", "2.3%", "memory"],
                    ["backward", "43", "59.3 us", "1.9%", "compute"],
                    ["forward", "14", "50.1 us", "1.6%", "compute"]]
    assert "OVERHEAD-BOUND as traced (an upper bound): 94% of 3.18 ms per step" in out
    assert "time by phase" not in terminal(forward_only)


def test_html_has_a_time_by_phase_section_for_a_training_step(train_step, forward_only):
    page = render_report(train_step)
    section = page[page.index('<section id="phases">'):page.index('<section id="roofline">')]
    assert "<h2>Time by phase</h2>" in section
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section)
    # rows_table's columns: name, calls, time, % of T, FLOPs, bytes, FLOP/B, achieved,
    # % roofline, bound; the same numbers as the terminal's
    assert [cells[i:i + 4] + [cells[i + 9]] for i in range(0, len(cells), 10)] == [
        ["optimizer", "27", "74.5 us", "2.3%", "memory"],
        ["backward", "43", "59.3 us", "1.9%", "compute"],
        ["forward", "14", "50.1 us", "1.6%", "compute"]]
    assert 'id="phases"' not in render_report(forward_only)


# ---------------------------------------------------------------- gobrrr show


def show(*args):
    return CliRunner().invoke(cli, ["show", *map(str, args)])


def test_show_renders_the_saved_ddp_report_with_four_parts(tmp_path):
    r = show(DDP, "--html", tmp_path / "out" / "r.html", "--trace", tmp_path / "t.json")
    assert r.exit_code == 0, r.output
    page = (tmp_path / "out" / "r.html").read_text(encoding="utf-8")
    line = page[page.index('<p class="budget-sum"'):]
    line = line[:line.index("</p>")]
    total_s = float(re.search(r'data-total-s="([^"]+)"', line).group(1))
    parts_s = {k: float(s) for k, s in re.findall(r'class="tag (\w+)" data-s="([^"]+)"',
                                                  line)}
    assert parts_s == {"overhead": 0.0, "memory": 0.0030074730608953765, "compute": 0.0,
                       "communication": 0.0039062509391049665}
    # 0 + 3.0075 + 0 + 3.9063 ms = 6.9137 ms: the parts shown sum to T, the budget's
    # T_wall, exactly (the same additions, in the same order, as Budget.total_s)
    assert sum(parts_s.values()) == total_s == 0.006913724000000343
    assert ("T_wall = overhead + memory + compute + communication:\n6.91 ms per call ="
            in line)
    assert ">memory 3.01 ms</span> +" in line and ">communication 3.91 ms</span>." in line
    # the verdict: 56% of the four parts' 6.91 ms (the page said 3.01 ms, memory alone),
    # in the communication colour (there was no style: white on white)
    assert ('<div class="verdict communication">COMMUNICATION-BOUND: '
            "56% of 6.91 ms per call</div>") in page
    assert ".gobrrr-report .communication{background:#d55e00}" in page
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["otherData"]["gobrrr.regime"] == "communication"
    assert trace["otherData"]["gobrrr.wall_us"] == 6913.724  # 6.913724 ms, rounded to ns
    # stdout: the terminal report, the same as printing the file's dict
    assert r.stdout == terminal(json.loads(DDP.read_text()))


def test_show_prints_the_saved_ddp_reports_total_and_four_parts():
    r = show(DDP)
    assert r.exit_code == 0, r.output
    assert "COMMUNICATION-BOUND: 56% of 6.91 ms per call" in r.stdout
    # each part with its share of T (fractions: 0, 0.435, 0, 0.565)
    assert ("overhead 0 us (0%)  memory 3.01 ms (44%)  compute 0 us (0%)  "
            "communication 3.91 ms (56%)") in r.stdout
    bar = next(line for line in r.stdout.splitlines() if line.startswith("█"))
    assert len(bar) == 60  # one cell per 1/60 of T at this width
    # ... in the parts' colours: memory round(0.435 x 60) = 26 cells, communication the
    # other 34 (overhead and compute: none)
    fractions = json.loads(DDP.read_text())["budget"]["fractions"]
    assert _budget_bar(fractions, 60) == ("[#d99a00][/][#1f78b4]" + "█" * 26 + "[/]"
                                          "[#9b2d9b][/][#d55e00]" + "█" * 34 + "[/]")
    assert "ranks (2, nccl)" in r.stdout  # the distributed section, from the same dict


@pytest.mark.parametrize("name, content, needle", [
    ("missing.json", None, "cannot read"),
    ("notes.json", "not { json", "is not JSON"),
    ("ceilings.json", json.dumps({"peak_flops_per_s": {"fp32": 1e12},
                                  "bandwidth_bytes_per_s": 1e12}),
     "is gobrrr ceilings JSON, not a gobrrr report"),
    ("other.json", json.dumps({"traceEvents": []}), "not a gobrrr report"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, name, content, needle):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    r = show(path, "--html", tmp_path / "r.html")
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("gobrrr: error: "), r.output
    assert needle in lines[0] and str(path) in lines[0]
    assert not (tmp_path / "r.html").exists()


def test_unwritable_output_is_refused_before_reading(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    r = show(tmp_path / "missing.json", "--html", a_file / "r.html")
    assert r.exit_code == 2
    # the output is checked first: the error names it, not the missing report
    assert "cannot write" in r.output and "missing.json" not in r.output


def test_show_prints_what_doctor_printed(tmp_path, monkeypatch):
    import gobrrr.api

    made = []
    real = gobrrr.api.diagnose_workload

    def keep(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    monkeypatch.setattr(gobrrr.api, "diagnose_workload", keep)
    doctor = CliRunner().invoke(cli, ["doctor", "examples:mlp_train", "--device", "cpu",
                                      "-q", "--no-experiments", "--time-budget", "0.05"])
    assert doctor.exit_code == 0, doctor.output
    saved = tmp_path / "report.json"
    saved.write_text(made[0].to_json())  # what `doctor --json` would have written
    again = show(saved)
    assert again.exit_code == 0, again.output
    assert again.stdout == doctor.stdout
    assert "time by phase" in again.stdout  # a training step: forward, backward, AdamW


def test_python_dash_m_show():
    out = subprocess.run([sys.executable, "-m", "gobrrr", "show", str(DDP)],
                         capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "NO_COLOR": "1"})
    assert out.returncode == 0, out.stderr
    assert "COMMUNICATION-BOUND: 56% of 6.91 ms" in out.stdout

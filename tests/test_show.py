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
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from gobrrr.analyze import analyze
from gobrrr.show import render_report
from gobrrr.show.budget_view import budget_parts, phase_rows
from gobrrr.show.terminal import print_report

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
    assert "OVERHEAD-BOUND: 94% of 3.18 ms per step" in out
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

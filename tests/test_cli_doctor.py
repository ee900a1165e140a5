"""`gobrrr doctor`: targets, JSON, and bad input (one line, exit 2)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gobrrr.cli import cli

TARGETS = Path(__file__).parent / "data" / "targets.py"


def run(*args):
    return CliRunner().invoke(cli, ["doctor", *args])


def error_lines(result):
    return [x for x in result.stderr.splitlines() if x.startswith("gobrrr: error")]


def test_file_target_json():
    r = run(f"{TARGETS}:good", "--json", "-q", "--time-budget", "0.2", "--device", "cpu")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["workload"]["batch_size"] == 4
    assert d["regime"] == max(d["fractions"], key=d["fractions"].get)
    assert d["experiments"]["batch_scaling"]["points"][1]["batch_size"] == 8


@pytest.mark.slow
def test_repeat_times_the_command_in_fresh_processes(monkeypatch):
    import subprocess

    from gobrrr.schema import validate

    seen = []
    real = subprocess.run

    def spy(cmd, **kw):
        seen.append(cmd)
        return real(cmd, **kw)

    monkeypatch.setattr(subprocess, "run", spy)
    r = run(f"{TARGETS}:good", "--json", "-q", "--no-experiments", "--repeat", "2",
            "--time-budget", "0.1", "--device", "cpu", "--batch-size", "3")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    validate(d, "report")
    t = d["timing"]
    assert len(t["runs_s"]) == 2 and t["runs_s"][0] == t["median_s"] and t["runs_s"][1] > 0
    assert any(n.startswith("T_wall in 2 processes (this one, then 1 fresh") for n in
               d["notes"])
    # the child: the same target and options, without experiments
    child = [c for c in seen if "doctor" in c]
    assert len(child) == 1 and child[0][4:] == [
        f"{TARGETS}:good", "--device", "cpu", "--time-budget", "0.1", "--batch-size", "3",
        "--no-experiments", "--json", "-q"]


def test_repeat_needs_a_named_target_in_one_process():
    r = run("hf:gpt2", "--generate", "4", "--repeat", "2", "--device", "cpu")
    assert r.exit_code == 2 and len(error_lines(r)) == 1
    assert "--repeat reruns a named target" in error_lines(r)[0]


def test_batch_size_option():
    r = run(f"{TARGETS}:good", "--json", "-q", "--no-experiments", "--batch-size", "3",
            "--time-budget", "0.2", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["workload"]["batch_size"] == 3


def test_non_factory_target_scales_dim0():
    r = run(f"{TARGETS}:no_batch", "--json", "-q", "--time-budget", "0.2", "--device", "cpu")
    assert r.exit_code == 0, r.output
    pts = json.loads(r.stdout)["experiments"]["batch_scaling"]["points"]
    assert pts[1]["factor"] == 2 and pts[1]["time_s"] > 0


@pytest.mark.parametrize("target,needle", [
    ("no/such/file.py:fn", "no such file"),
    (f"{TARGETS}:missing", "has no attribute 'missing'"),
    (f"{TARGETS}:wrong_return", "must return (callable, args_tuple)"),
    (f"{TARGETS}:NOT_CALLABLE", "is not callable"),
    ("examples:nope", "unknown example"),
    ("just_a_name", "must be FILE.py:NAME"),
])
def test_bad_targets_are_one_line_errors(target, needle):
    r = run(target, "-q", "--device", "cpu")
    assert r.exit_code == 2
    lines = error_lines(r)
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_workload_that_raises_shows_the_users_traceback(gobrrr_frames):
    r = run(f"{TARGETS}:builds_but_raises", "-q", "--device", "cpu")
    assert r.exit_code == 2
    assert "Traceback" in r.stderr and "targets.py" in r.stderr
    assert not gobrrr_frames(r.stderr.split("gobrrr: error")[0])
    assert "RuntimeError" in error_lines(r)[0]


def test_factory_that_raises_shows_the_users_traceback():
    r = run(f"{TARGETS}:factory_raises", "-q", "--device", "cpu")
    assert r.exit_code == 2
    assert "the user's factory is broken" in r.stderr and "targets.py" in r.stderr


def test_dropout_workload_is_fine():
    r = run(f"{TARGETS}:with_dropout", "-q", "--json", "--time-budget", "0.2",
            "--device", "cpu")
    assert r.exit_code == 0, r.output


def test_terminal_output_fits_80_columns(monkeypatch):
    monkeypatch.setenv("TERMINAL_WIDTH", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    r = run(f"{TARGETS}:good", "-q", "--time-budget", "0.2", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "BOUND" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "\x1b[" not in r.stdout


def test_larger_batch_that_fails_is_reported_and_the_verdict_stands():
    r = run(f"{TARGETS}:fails_above_4", "--json", "-q", "--time-budget", "0.2",
            "--device", "cpu")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    points = d["experiments"]["batch_scaling"]["points"]
    assert points[1]["time_s"] is None and "out of memory" in points[1]["error"]
    assert "did not run" in d["experiments"]["batch_scaling"]["reading"]
    assert d["regime"] == max(d["fractions"], key=d["fractions"].get)


def test_unwritable_output_is_refused_before_any_work(tmp_path, monkeypatch):
    import gobrrr.api

    def never(*a, **k):
        raise AssertionError("diagnose must not start")

    monkeypatch.setattr(gobrrr.api, "diagnose_workload", never)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    r = run("examples:mlp", "--device", "cpu", "-q", "--html", str(a_file / "r.html"))
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "is not a writable directory" in lines[0], r.output
    # A folder given as the file: click's own usage error (exit 2), as for any option.
    r = run("examples:mlp", "--device", "cpu", "-q", "--html", str(tmp_path))
    assert r.exit_code == 2 and "is a directory" in r.output
    r = run("examples:mlp", "--device", "cpu", "-q", "--trace", str(a_file / "t.json"))
    assert r.exit_code == 2 and "cannot write" in r.output


def test_a_write_that_fails_at_the_end_still_prints_the_report(tmp_path, monkeypatch):
    import errno

    import gobrrr.show

    def disk_full(report, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gobrrr.show, "save_html", disk_full)
    r = run("examples:mlp", "--device", "cpu", "-q", "--json", "--no-experiments",
            "--time-budget", "0.1", "--html", str(tmp_path / "r.html"))
    assert r.exit_code == 2
    assert json.loads(r.stdout)["schema"] == "gobrrr.report"  # the result is not lost
    assert "No space left on device" in r.stderr and "the result is on stdout" in r.stderr


SIGS = '''
import torch
def three(a, b, c):
    return (lambda x: x), (torch.ones(1),)
def kwonly(*, size):
    return (lambda x: x), (torch.ones(1),)
def fortytwo():
    return 42, (torch.ones(1),)
'''


@pytest.mark.parametrize("name,says", [
    # issue 28: gobrrr called these wrongly and the error read as the user's
    ("three", "takes (a, b, c): gobrrr calls NAME() or NAME(batch_size)"),
    ("kwonly", "give size a default"),
    ("fortytwo", "got (int, tuple): its first item is not callable"),
])
def test_a_target_gobrrr_cannot_call_says_why(tmp_path, name, says):
    f = tmp_path / "sigs.py"
    f.write_text(SIGS)
    r = run(f"{f}:{name}", "-q", "--device", "cpu")
    assert r.exit_code == 2
    lines = error_lines(r)
    assert len(lines) == 1 and says in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_bare_script_names_every_kind_of_target(tmp_path):
    f = tmp_path / "train.py"
    f.write_text("x = 1\n")
    r = run(str(f), "-q", "--device", "cpu")
    (line,) = error_lines(r)
    assert "hf:NAME, timm:NAME or torchvision:NAME" in line and f"{f}:NAME" in line


@pytest.mark.parametrize("option,value", [("--time-budget", "nan"), ("--time-budget", "inf"),
                                          ("--batch-size", "99999999999999999999"),
                                          ("--repeat", "0")])
def test_numbers_no_run_can_use_are_refused(option, value):
    r = run("examples:mlp", option, value, "--device", "cpu")
    assert r.exit_code == 2 and "Invalid value" in r.output
    assert "Traceback" not in r.output


def test_the_nproc_shortcut_checks_the_target_first(tmp_path):
    # issue 28: a missing file or a syntax error became exit 1 and torch's traceback,
    # once per rank
    bad = tmp_path / "bad.py"
    bad.write_text("def make(:\n")
    for target, says in ((f"{bad}:make", "bad.py:1: invalid syntax"),
                         (f"{tmp_path}/none.py:make", "no such file")):
        r = run("--nproc-per-node", "2", target, "--device", "cpu")
        assert r.exit_code == 2, r.output
        lines = error_lines(r)
        assert len(lines) == 1 and says in lines[0], r.stderr

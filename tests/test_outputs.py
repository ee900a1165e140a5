"""Output paths (issue 28, group 7): the workload's own prints never reach a --json
stdout, a stdout that fails is one line, control characters from a trace never reach the
terminal raw, Ctrl-C exits 130 and optimize keeps what it measured."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TARGET = """
import os
import torch

def chatty(batch_size=4):
    x = torch.randn(batch_size, 16)

    def step(x):
        print("the workload talks")  # a user's print, every call
        return x.sin()

    os.system("echo from a child process")  # C-level output, on descriptor 1
    return step, (x,)
"""


def _run(args, tmp_path, **kw):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "gobrrr", *args], env=env,
                          capture_output=True, text=True, timeout=300, **kw)


def test_the_workloads_prints_go_to_stderr_with_json(tmp_path):
    f = tmp_path / "t.py"
    f.write_text(TARGET)
    p = _run(["doctor", f"{f}:chatty", "--device", "cpu", "--json", "-q",
              "--no-experiments", "--time-budget", "0.05"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)  # one document: the prints did not come before it
    assert d["schema"] == "gobrrr.report"
    assert "the workload talks" in p.stderr and "from a child process" in p.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_stdout_that_fails_is_one_line(tmp_path):
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "gobrrr", "calibrate", "--device", "cpu",
                            "--json", "-q"], stdout=full, stderr=subprocess.PIPE, text=True,
                           # the session's calibration (conftest): read, not measured
                           env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")),
                           timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert "Traceback" not in p.stderr
    assert lines[-1].startswith("gobrrr: error: cannot write the result to stdout"), lines


def test_control_characters_in_names_are_escaped(tmp_path):
    # issue 28: an ESC[2J (clear screen) in a module name from a trace reached the
    # terminal raw; every string the terminal prints of a report is made printable
    data = Path(__file__).parent / "data" / "traces" / "pointwise_chain.json.gz"
    p = _run(["analyze", str(data), "--json", "-q"], tmp_path)
    d = json.loads(p.stdout)
    d["budget"]["per_op"][0]["name"] = "aten::mul\x1b[2J"
    d["budget"]["per_module"][0]["name"] = "Block\x07\x1b]0;owned\x07"
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(d))
    p = _run(["show", str(saved)], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    for raw, shown in (("\x1b[2J", "\\x1b[2J"), ("\x1b]0;", "\\x1b]0;"), ("\x07", "\\x07")):
        assert raw not in p.stdout and shown in p.stdout, (raw, p.stdout[-1500:])


def test_ctrl_c_exits_130_and_optimize_keeps_what_it_measured(tmp_path):
    f = tmp_path / "slow.py"
    # 20 ms a call: every candidate takes seconds (a warm-up, two checked calls, A/B
    # rounds), so the search is still running when the first result line is read
    f.write_text("import time, torch\n"
                 "def make(batch_size=64):\n"
                 "    x = torch.randn(batch_size, 256)\n"
                 "    w = torch.randn(256, 256)\n"
                 "    def step(a):\n"
                 "        time.sleep(0.02)\n"
                 "        return (a @ w).relu()\n"
                 "    return step, (x,)\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), NO_COLOR="1")
    # SIGINT at its default in the child, as from a terminal: a suite started in the
    # background by a shell without job control inherits it ignored, and so would gobrrr
    p = subprocess.Popen([sys.executable, "-m", "gobrrr", "optimize", f"{f}:make",
                          "--device", "cpu", "--no-diagnose", "--budget-s", "120",
                          "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # the first candidate has been measured once its result line is printed
    deadline = time.monotonic() + 120
    seen = ""
    while "->" not in seen and time.monotonic() < deadline:
        seen += p.stderr.readline()
    assert "->" in seen, seen
    assert p.poll() is None, "the search ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    assert "Aborted!" not in err
    d = json.loads(out)  # the result, with what was measured before the interrupt
    measured = [r for r in d["remedies"] if r["measured_speedup"] is not None]
    assert measured, d["remedies"]
    assert any(r["reason"] == "interrupted (Ctrl-C)" for r in d["remedies"])
    assert any(n.startswith("interrupted (Ctrl-C)") for n in d["notes"])

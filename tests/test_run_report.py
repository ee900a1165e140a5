"""`gobrrr run`'s report process (cli/run_report.py) lowers its own priority before it
imports the analysis, and lowers its session's autogroup only where the session is its
own (cli/run.py starts it in one)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = textwrap.dedent('''
    import json, os, sys
    import gobrrr.cli.run_report as rr
    heavy = [m for m in ("torch", "numpy", "gobrrr.script_report", "gobrrr.show.files")
             if m in sys.modules]
    done = rr.lower_priority()
    ag = open("/proc/self/autogroup").read() if os.path.exists("/proc/self/autogroup") \\
        else None
    print(json.dumps({"heavy": heavy, "done": done, "policy": os.sched_getscheduler(0)
                      if hasattr(os, "sched_getscheduler") else None,
                      "nice": os.nice(0), "autogroup": ag}))
''')


def _probe(new_session: bool) -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       timeout=120, start_new_session=new_session)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _autogroup_nice(text: str) -> int:
    return int(text.split("nice")[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling")
def test_the_report_process_runs_below_the_script_before_its_imports():
    got = _probe(new_session=True)
    assert got["heavy"] == []  # the analysis is imported after lower_priority
    if "SCHED_IDLE" in got["done"]:
        assert got["policy"] == os.SCHED_IDLE
    else:  # not permitted here (a seccomp or container policy): the lowest nice
        assert got["nice"] == 19 and "nice 19" in got["done"]
    if got["autogroup"] is not None and "autogroup nice 19" in got["done"]:
        assert _autogroup_nice(got["autogroup"]) == 19


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no autogroups")
def test_a_process_that_shares_its_session_leaves_the_autogroup_alone():
    mine = Path("/proc/self/autogroup").read_text()
    got = _probe(new_session=False)
    assert not any(d.startswith("autogroup") for d in got["done"])
    assert got["autogroup"] == mine  # the session's group, ours: untouched
    assert Path("/proc/self/autogroup").read_text() == mine

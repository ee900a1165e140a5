"""A compile probe in a child process: the search's first compile, where its time is only
a prior guess that does not fit the time left, runs first in a process that can be
stopped at the deadline.

A compile inside the search's own process cannot be interrupted: on the H200 at
--budget-s 60 the GPT-2 training step's reduce-overhead compile, probed because it
predicted the largest gain, was still compiling when the deadline came and the run ended
at 86 s against the 79 s allowed (issue 24). Here a child builds the same workload from
its target (`Workload.reload`: the CLI's target and options; a callable has none and
keeps the in-process probe), applies the candidate's remedies to a copy and makes the
warm calls that compile it, and says how long that took. Stopped at the deadline, the
candidate is skipped with the seconds it had; finished, the search compiles it in its
own process from the caches the child filled (Inductor's FX graph, AOTAutograd and
Triton caches on disk: the same user, the same cache directory), and every later compile
estimate scales the child's cold compile time, the one a fresh compile takes.

The child is `python -m gobrrr.remedies.compile_child_main SPEC_JSON` (SPEC: reload +
remedies); it prints one JSON line: {"compile_s": ...} or {"error": "..."}.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["ChildCompile", "compile_in_child", "reload_spec", "START_S", "RECOMPILE_FACTOR"]

# What the child needs before its compile starts (Python, torch, the model built, one
# priming call): the child is not started when less than this is left.
START_S = 10.0
# The search's compile again from the child's caches, against the child's cold compile.
# The caches hold Inductor's generated code and Triton's kernels; dynamo's tracing,
# AOTAutograd and the lowering run again. On the H200 (torch 2.11, GPT-2 1x1,
# inference_mode + reduce-overhead + freezing, 2026-12-02) the child compiled in 20.0 s
# and the search's first warm call alone then took 11.5 s (0.58x), past the deadline:
# the rest of the warm calls (CUDA-graph recording) is what the margin above it is for.
RECOMPILE_FACTOR = 0.75


@dataclass(frozen=True)
class ChildCompile:
    compile_s: float | None  # the child's preparation and warm calls; None: not done
    timed_out: bool = False  # stopped at the deadline after `waited_s`
    waited_s: float = 0.0
    error: str | None = None  # the child failed: its last line


def _stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def reload_spec(target: str | None, device: str, batch_size: int | None,
                options: Any) -> dict[str, Any]:
    """What a child needs to build a target's workload again (Workload.reload)."""
    from dataclasses import asdict

    return {"target": target, "device": device, "batch_size": batch_size,
            "options": asdict(options) if options is not None else None}


def compile_in_child(reload: dict[str, Any], remedies: list[str],
                     timeout_s: float) -> ChildCompile:
    """Run the child (module docstring) for at most `timeout_s`; the child inherits the
    environment, so its caches are this process's."""
    spec = json.dumps(dict(reload, remedies=remedies))
    cmd = [sys.executable, "-m", "gobrrr.remedies.compile_child_main", spec]
    t0 = time.perf_counter()
    # its own process group: stopping it stops Inductor's compile workers with it
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return ChildCompile(None, timed_out=True, waited_s=time.perf_counter() - t0)
    except BaseException:  # a Ctrl-C in the search: the child goes with it
        _stop(proc)
        raise
    done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    waited = time.perf_counter() - t0
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    try:
        got = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        got = {}
    if done.returncode == 0 and isinstance(got.get("compile_s"), (int, float)):
        return ChildCompile(float(got["compile_s"]), waited_s=waited)
    last = got.get("error") or next(
        (ln for ln in reversed(done.stderr.splitlines()) if ln.strip()),
        f"exit status {done.returncode}")
    return ChildCompile(None, waited_s=waited, error=str(last)[:300])

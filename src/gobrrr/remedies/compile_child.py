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

On a CUDA device with cores to spare the child starts in the background as soon as the
search knows its first probe (`ChildProber.start`), and compiles while the cheap
candidates are measured: on the H200 at --budget-s 60 (2026-12-02, session i) a child
started only when the probe's turn came had not finished after 22 s on GPT-2 1x1,
ResNet-50 b1 and BERT, and every compile was abandoned (their cold compiles take
~20 s, the child's start 5-8 s more). The background child is confined to the cores the
search leaves (`background_cores`) at a lower priority; the notes say it ran, and that
the timings meanwhile shared the machine with it. Cores of their own do not keep the
search's host from slowing: on the H200 (session q, `benchmarks/background_contention.py`)
busy loops on the 12 other cores at nice 10 took GPT-2 8x512 cast to bf16, a call its
host bounds, from 10.1 to 13.7 ms (A/B over fp32 2.97x -> 2.02x). Stopping the child
while each candidate was timed was tried (session q): the compiles of GPT-2 8x512,
BERT-base and GPT-2 1x1 then no longer fitted in --budget-s 60, and the bf16 cast inside
the search still measured 1.58-2.05x against 2.9-3.4x in a process of its own (other
device calls: not settled, docs/optimize.md), so it was taken out again.

A measuring child (`start_child(measure_ab_s=...)`, what the search starts) also holds
the eager reference and, compiled, waits for the search's turn: where the compile again
in the search's process no longer fits, `ChildRun.measure` has it verify and A/B-time
the candidate there and send the row back, so the compile is paid once (runner.py).

A child started before the diagnosis (`prestart_child`: remedies not yet known) imports
torch and builds the workload while the search's diagnosis runs, then waits for the
background compile's remedies (`ChildRun.begin`): its start is off the search's path. On
the H200 at --budget-s 60 (session s) BERT-base's background compile, started after an
18 s build and an 8.8 s diagnosis, had not finished after 29-30 s, in two sittings: the
child's own start (import and build again, 10-18 s) came first. Its build's device work
(the weights' initialisation) overlaps the diagnosis; nothing more runs there until told,
except in a training step's child told to speculate (`speculate`: speculation.py), which
compiles its guess at once. The CLI starts it before its own build (runner.prestart).

The child is `python -m gobrrr.remedies.compile_child_main SPEC_JSON` (SPEC: reload +
remedies [+ measure, ab_budget_s]; remedies null: pre-started, they come as its first
input line {"remedies": [...]}); it prints JSON lines: {"compile_s": ...} or
{"error": "..."}, then for a measuring child told to measure {"result": row}.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChildCompile", "ChildRun", "compile_in_child", "start_child", "prestart_child",
           "background_cores", "likely_cuda", "early_child",
           "reload_spec", "START_S", "RECOMPILE_FACTOR", "BACKGROUND_NICE",
           "CHILD_ANSWER_S"]

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
# What a measuring child's answer needs beyond the measuring itself (the order written,
# its row read back): left after its compile.
CHILD_ANSWER_S = 1.0
# The background child's priority (nice): below the search, whose timed calls it shares
# the machine with.
BACKGROUND_NICE = 10
# A background child needs this many cores: the search keeps a quarter (at least 2: its
# Python thread and the CUDA driver's), the child and its compile workers the rest.
MIN_BACKGROUND_CORES = 4


@dataclass(frozen=True)
class ChildCompile:
    compile_s: float | None  # the child's preparation and warm calls; None: not done
    timed_out: bool = False  # stopped at the deadline after `waited_s`
    waited_s: float = 0.0  # since the child started
    error: str | None = None  # the child failed: its last line
    remedies: tuple[str, ...] = ()  # what it compiled
    # seconds after the child was spawned: its workload built ("built_s"), its compile
    # begun ("compile_from_s"), its compile line read here ("answered_s")
    timeline: dict[str, float] | None = None
    # a measuring child (start_child(measure_ab_s=...)), compiled and waiting for its
    # turn: ChildRun.measure verifies and times it there
    run: ChildRun | None = field(default=None, compare=False, repr=False)


def _stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError, ValueError):
        if proc.stdin is not None:
            proc.stdin.close()
    proc.wait()  # its output is read by ChildRun's threads


def reload_spec(target: str | None, device: str, batch_size: int | None,
                options: Any) -> dict[str, Any]:
    """What a child needs to build a target's workload again (Workload.reload)."""
    from dataclasses import asdict

    return {"target": target, "device": device, "batch_size": batch_size,
            "options": asdict(options) if options is not None else None}


def background_cores() -> list[int] | None:
    """The cores a background child may use (module docstring): all but the first
    quarter (at least 2) of this process's, or None where fewer than
    MIN_BACKGROUND_CORES are available."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None
    if len(cores) < MIN_BACKGROUND_CORES:
        return None
    return cores[max(2, len(cores) // 4):]


class ChildRun:
    """One child (module docstring), started; `wait` reads its compile, `measure` (a
    measuring child) has it verify and time the candidate, `stop` ends it. Its output is
    read by threads as it comes, so that a child waiting on its input can be answered."""

    def __init__(self, reload: dict[str, Any], remedies: list[str] | None,
                 cores: list[int] | None = None, measure_ab_s: float | None = None,
                 speculate: bool = False, only: list[str] | None = None) -> None:
        spec = dict(reload, remedies=remedies)
        if measure_ab_s is not None:
            spec.update(measure=True, ab_budget_s=measure_ab_s)
        if speculate and remedies is None:
            spec.update(speculate=True, only=only)
        self.remedies = tuple(remedies or ())
        self.waiting_for_remedies = remedies is None  # pre-started (prestart_child)
        # what a speculating child announced it compiles before being told (speculation.py)
        self.speculating: tuple[str, ...] = ()
        self.speculating_at_s: float | None = None  # since its spawn: the guess began
        self.answered = False  # its compile's answer (or an error) came back
        # what it compiled, once its compile's answer came back without an error (read
        # by _read_out before any `wait`: the plan asks while the search measures)
        self.compiled: tuple[str, ...] | None = None
        self.cores = cores
        self.measuring = measure_ab_s is not None
        env = dict(os.environ)  # its caches are this process's
        if cores:
            env["TORCHINDUCTOR_COMPILE_THREADS"] = str(len(cores))
        self.t0 = self.spawned = time.perf_counter()
        # its own process group: stopping it stops Inductor's compile workers with it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gobrrr.remedies.compile_child_main", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, start_new_session=True)
        if cores:
            # set before its compile workers start (Python and torch take seconds to
            # import): they inherit both
            with contextlib.suppress(OSError):
                os.sched_setaffinity(self.proc.pid, cores)
                os.setpriority(os.PRIO_PROCESS, self.proc.pid, BACKGROUND_NICE)
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._err: list[str] = []
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    got = json.loads(line)
                    if "speculating" in got:
                        self.speculating = tuple(got["speculating"])
                        self.speculating_at_s = time.perf_counter() - self.spawned
                    else:
                        self.answered = True
                        if isinstance(got.get("compile_s"), (int, float)):
                            self.compiled = tuple(got.get("remedies") or self.remedies)
                        self._lines.put(got)
        self._lines.put(None)  # end of its output

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.strip():
                self._err = [*self._err[-20:], line.rstrip()]

    def _next(self, timeout_s: float) -> dict[str, Any] | None:
        """Its next JSON line; None at the end of its output; TimeoutError."""
        try:
            return self._lines.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            raise TimeoutError from None

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0

    def compiling(self) -> bool:
        """Whether it is compiling now: running, told what to compile (or compiling its
        own guess), its answer not yet back. Its compile workers then share the host
        with the search's timed calls (quiet.py)."""
        told = not self.waiting_for_remedies or bool(self.speculating)
        return told and not self.answered and self.proc.poll() is None

    def waits_compiled(self) -> tuple[str, ...] | None:
        """What a measuring child compiled and now waits, running, to verify and time
        (`measure`); None while it compiles, where it failed or ended, or where it does
        not measure."""
        if self.measuring and self.compiled is not None and self.proc.poll() is None:
            return self.compiled
        return None

    def begin(self, remedies: list[str]) -> None:
        """Tell a pre-started child what to compile; its wait counts from now (its
        start, spent while the search diagnosed, is not this compile's)."""
        assert self.waiting_for_remedies and self.proc.stdin is not None
        self.waiting_for_remedies = False
        self.remedies = tuple(remedies)
        self.t0 = time.perf_counter()
        with contextlib.suppress(OSError):  # a child that died: its wait says why
            self.proc.stdin.write(json.dumps({"remedies": remedies}) + "\n")
            self.proc.stdin.flush()

    def _failed(self, got: dict[str, Any] | None) -> ChildCompile:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        reason = None
        if got is not None:
            reason = got.get("error") or (got.get("result") or {}).get("reason")
        last = reason or (self._err[-1] if self._err else
                          f"exit status {self.proc.returncode}")
        self.stop()
        return ChildCompile(None, waited_s=self.elapsed_s(), error=str(last)[:300],
                            remedies=self.remedies)

    def wait(self, timeout_s: float) -> ChildCompile:
        """Its compile within `timeout_s` from now, else stopped (timed_out). A measuring
        child is left waiting for `measure` (ChildCompile.run); any other has ended."""
        try:
            got = self._next(timeout_s)
        except TimeoutError:
            self.stop()
            timeline = {"stopped_s": round(time.perf_counter() - self.spawned, 2)}
            if self.speculating_at_s is not None:
                timeline["compile_from_s"] = round(self.speculating_at_s, 2)
            return ChildCompile(None, timed_out=True, waited_s=self.elapsed_s(),
                                remedies=self.remedies, timeline=timeline)
        except BaseException:  # a Ctrl-C in the search: the child goes with it
            self.stop()
            raise
        if got is None or not isinstance(got.get("compile_s"), (int, float)):
            return self._failed(got)
        waiting = self.measuring and self.proc.poll() is None
        if not waiting:
            self.stop()
        # a speculating child's own guess, where it differs from what it was told
        self.remedies = tuple(got.get("remedies") or self.remedies)
        timeline = {k: round(float(got[k]), 2) for k in ("built_s", "compile_from_s")
                    if isinstance(got.get(k), (int, float))}
        timeline["answered_s"] = round(time.perf_counter() - self.spawned, 2)
        return ChildCompile(float(got["compile_s"]), waited_s=self.elapsed_s(),
                            remedies=self.remedies, run=self if waiting else None,
                            timeline=timeline)

    def measure(self, time_left_s: float) -> dict[str, Any] | None:
        """Have the waiting child verify and time its candidate within `time_left_s`:
        its row (RemedyResult.to_dict()), or None when it failed or ran out of time
        (stopped)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"time_left_s": time_left_s}) + "\n")
            self.proc.stdin.flush()
            got = self._next(time_left_s + 5.0)  # its own deadline ends it before
        except (TimeoutError, OSError):
            self.stop()
            return None
        except BaseException:
            self.stop()
            raise
        self.stop()
        return (got or {}).get("result")

    def stop(self) -> None:
        _stop(self.proc)


def start_child(reload: dict[str, Any], remedies: list[str],
                cores: list[int] | None = None,
                measure_ab_s: float | None = None) -> ChildRun:
    """Start the child (module docstring); `cores`: confine it there, at BACKGROUND_NICE;
    `measure_ab_s`: a measuring child (compile_child_main.py) with that A/B budget."""
    return ChildRun(reload, remedies, cores, measure_ab_s)


def prestart_child(reload: dict[str, Any], cores: list[int] | None,
                   measure_ab_s: float | None = None,
                   speculate: bool = False, only: list[str] | None = None) -> ChildRun:
    """A child that builds the workload now and waits for `ChildRun.begin` (module
    docstring), confined to `cores` at BACKGROUND_NICE as a background child.
    `speculate`: a training step's child compiles speculation.py's guess (from the
    remedies `only` selects) without waiting for `begin`."""
    return ChildRun(reload, None, cores, measure_ab_s, speculate, only)


def likely_cuda(device: str) -> bool:
    """Whether --device (auto, cpu or cuda) will resolve to CUDA, told before torch is
    imported: asked for, or auto where NVIDIA's kernel driver is loaded. The search's
    process checks again once torch is in (cli/optimize.py stops a child started in
    vain)."""
    return device == "cuda" or (device == "auto"
                                and os.path.exists("/proc/driver/nvidia/version"))


def early_child(reload: dict[str, Any], device: str, only: list[str] | None,
                measure_ab_s: float) -> ChildRun | None:
    """The background child (`prestart_child`, told to speculate), started by the CLI
    before it imports torch itself: on the H200's host that import took 4-5 s, which the
    child's own start then waited for. Where --device is likely CUDA (`likely_cuda`)
    with cores to spare; None elsewhere. Its reload spec's device is "cuda"."""
    cores = background_cores()
    if not likely_cuda(device) or cores is None:
        return None
    return prestart_child(dict(reload, device="cuda"), cores, measure_ab_s,
                          speculate=True, only=only)


def compile_in_child(reload: dict[str, Any], remedies: list[str],
                     timeout_s: float) -> ChildCompile:
    """Run the child (module docstring) for at most `timeout_s`; the child inherits the
    environment, so its caches are this process's."""
    return start_child(reload, remedies).wait(timeout_s)

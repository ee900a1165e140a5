"""The live source: a workload gobrrr runs itself -> the measured run (run.py) and what
the end (diagnosis.py) reads beside it.

In this order, all inside state.preserved_state (the user's parameters, gradients,
optimizer state, inputs, RNG and flags are put back afterwards):
1. a compiled workload's first calls, timed apart (compile and capture never enter
   T_wall);
2. T_wall, unprofiled (timing.py), with the first call's output checked for NaN/inf;
3. the experiments, measured now and read against the budget by the end: the CUDA-graph
   replay, then the batch at 2x (and 4x);
4. the counted and profiled call (profile.py; compiled.py for compiled code): every
   timing comes before it, since a profiler can leave hooks that slow later launches;
5. FLOPs and bytes at the scaled batches, for the batch experiment's reading.
Every failure the diagnosis survives is a note with WARNING and a progress line, never a
silent default.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

# hardware, experiments and finite are called through their modules: tests replace
# their functions there (a calibration, an experiment that raises, the NaN check)
from gobrrr import compiled as comp
from gobrrr import experiments as exps
from gobrrr import finite, hardware
from gobrrr.compiled import CompileInfo
from gobrrr.contention import watch_cpu
from gobrrr.counting import count
from gobrrr.errors import WARNING, first_line
from gobrrr.experiments import BatchTimes, GraphTiming, Measured
from gobrrr.gemm_probe import GemmTimes, probe_gemms, shapes_by_flops
from gobrrr.hardware import Ceilings
from gobrrr.host_issue import HostIssue, cuda_hold, measure_host_issue
from gobrrr.profile import profile_counted
from gobrrr.remedies.base import reached_facts
from gobrrr.remedies.verify import ab_time
from gobrrr.run import MeasuredRun, Step
from gobrrr.state import StateCheck, preserved_globals, preserved_state
from gobrrr.timing import device_sync, few_samples_note, measure
from gobrrr.workload import Workload

__all__ = ["LiveMeasurement", "measure_live"]

Progress = Callable[[str], None]
T = TypeVar("T")


@dataclass
class LiveMeasurement:
    """The live source's results: the run, the ceilings it is judged by, the experiments
    to read against its budget, and what the report says of compiling and of the user's
    state."""

    run: MeasuredRun
    ceilings: Ceilings
    experiments: Measured
    state: StateCheck
    compiled: CompileInfo | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what remedies.Context reads
    started_s: float = 0.0  # time.perf_counter() when the source began
    memory: dict[str, Any] | None = None  # one step's memory (memory.py), experiments on


def measure_live(w: Workload, *, experiments: bool = True, time_budget_s: float = 2.0,
                 progress: Progress | None = None) -> LiveMeasurement:
    """The steps of the module docstring, for `w`."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    with preserved_globals():  # calibration must not consume the user's RNG either
        ceil = hardware.calibrate(w.device, progress=say)
    notes = list(ceil.notes)

    def warn(msg: str) -> None:
        """A failure the diagnosis survives: a note in the report and a progress line
        now, never a silent default."""
        notes.append(f"{WARNING}{msg}")
        say(f"{WARNING}{msg}")

    def timer(work: Workload) -> Any:
        return measure(lambda: work.run("timing"), device=work.device,
                       budget_s=time_budget_s)

    graph_t: GraphTiming | None = None
    batch_t: BatchTimes | None = None
    counts_by_factor: dict[int, tuple[int, int]] = {}
    compile_info: CompileInfo | None = None
    is_compiled = comp.is_compiled(w)
    facts = reached_facts(w)  # its modules and optimizers (the graph experiment's too)
    with preserved_state(w) as state:
        if is_compiled:
            # Compile (and capture) happen here, timed apart: never inside T_wall.
            say("compiled workload: first calls (compile and capture, timed apart)")
            first_s, steady_s, c_before, c_warm = comp.warm_up(w)
        # Every timing first, then the profiled run: a profiler can leave hooks behind
        # that slow later launches, and T_wall must never carry profiler cost.
        say(f"timing {w.name} on {w.device} (warm-up, then repeats)")
        first_output = _FirstOutputCheck(w)
        with watch_cpu() as cpu:
            wall = measure(first_output, device=w.device, budget_s=time_budget_s)
        if first_output.warning:
            warn(first_output.warning)
        if is_compiled:
            compile_info = comp.read_compile(
                first_s, steady_s, c_before, c_warm, comp.dynamo_counts(),
                wall.warmup_calls + wall.n_samples * wall.calls_per_sample)
            notes.append(f"compiled workload: first call {first_s:.3g} s, then "
                         f"{steady_s:.3g} s: compile and capture ~{compile_info.compile_s:.3g}"
                         " s, excluded from T_wall")
        host_issue_s = None
        if w.device == "cuda":
            issue = _attempt("the host's issue time", warn,
                             lambda: _host_issue(w, wall.median_s, time_budget_s))
            if issue is not None:
                host_issue_s = issue.issue_s
                if issue.note:
                    notes.append(f"host issue time not measured: {issue.note}")
        if wall.noisy:
            notes.append(f"wall time is noisy (IQR {100 * wall.rel_iqr:.0f}% of median)")
        if (few := few_samples_note(wall, time_budget_s)) is not None:
            notes.append(few)
        if experiments:
            if w.device == "cuda":
                say("experiment: CUDA-graph replay")
            graph_t = _attempt("the CUDA-graph replay experiment", warn, lambda: exps.graph_replay(
                w, wall, lambda f: measure(f, device=w.device, budget_s=time_budget_s),
                facts["optimizers"],
                paired=lambda a, b: _paired(a, b, w.device, time_budget_s)))
            if is_compiled and w.factory is None:
                batch_t = BatchTimes((), "the workload is compiled and has no factory: a "
                                     "2x batch would compile your code again (and can "
                                     "switch it to dynamic shapes)")
            else:
                rounds = exps.batch_rounds(wall.median_s, time_budget_s)
                batch_t = _attempt("the batch-scaling experiment", warn,
                                   lambda: exps.batch_times(w, wall, timer, say, rounds))
            if batch_t is not None and batch_t.skipped:
                notes.append(f"batch scaling skipped: {batch_t.skipped}")
        say("counting FLOPs and bytes per op" + (" in a profiled run" if w.device == "cuda"
                                                 else ", timing each op alone"))
        with watch_cpu() as cpu_counted:  # the CPU the op times had (contention.py)
            if is_compiled:
                eager = count(w.run, "counting the eager twin")
                profiled = comp.profile_compiled(w, wall.median_s, eager)
            else:
                profiled = profile_counted(w, wall.median_s)
        if not is_compiled and not profiled.counts.records and profiled.unattributed_s > 0:
            notes.append(comp.graph_replay_note(profiled, w, count))
        gemm_times: list[GemmTimes] = []
        shapes = shapes_by_flops(profiled.counts.records) if w.device == "cuda" else []
        if shapes:
            say(f"timing the workload's {len(shapes)} largest fp32 GEMM shapes in fp32, "
                "TF32 and bf16")
            gemm_times = _attempt("the GEMM shape probe", warn,
                                  lambda: probe_gemms(shapes)) or []
        if batch_t is not None:
            counts_by_factor = {1: (profiled.counts.total_flops,
                                    profiled.counts.total_bytes)}
            if not batch_t.skipped:
                more, batch_t = exps.batch_counts(w, batch_t)
                counts_by_factor |= more
            for p in batch_t.points:
                if p.error:
                    warn(f"batch scaling at {p.factor}x failed: {p.error}")
        memory = None
        if experiments and not is_compiled and 2 * wall.median_s > time_budget_s:
            notes.append(f"memory not measured: its two calls ({2 * wall.median_s:.3g} s) "
                         f"exceed the time budget of a measurement ({time_budget_s:g} s); "
                         "`gobrrr memory` measures it")
        elif experiments and not is_compiled:
            # what one step keeps alive (the report's `memory`): a warm call and one
            # under torch's MemTracker, the user's state restored as in `gobrrr memory`
            from gobrrr.memory import measure_memory

            say("memory: one call with every tensor storage followed (MemTracker)")
            got = _attempt("the memory measurement", warn, lambda: measure_memory(w))
            memory = got.to_dict() if got is not None else None
    for line in state.warnings:  # what could not be restored of the user's state
        warn(line)
    run = MeasuredRun(source="callable", workload=w.to_dict(), device=w.device, timing=wall,
                      wall_s=wall.median_s, profile=profiled,
                      steps=[Step(w.name, wall.median_s)], notes=notes,
                      contention=cpu[0] if cpu else None,
                      contention_counted=cpu_counted[0] if cpu_counted else None,
                      host_issue_s=host_issue_s, gemm_times=gemm_times)
    return LiveMeasurement(run, ceil, Measured(batch_t, counts_by_factor, graph_t), state,
                           compile_info, facts, t0, memory)


def _paired(eager: Callable[[], Any], replay: Callable[[], Any], device: str,
            budget_s: float) -> tuple[float, float]:
    """Eager and a CUDA-graph replay timed interleaved (ABBA rounds: drift and
    contention fall on both): (eager's median seconds per call, the median ratio)."""
    ab = ab_time(eager, replay, device=device, budget_s=budget_s)
    return ab.eager_s, ab.speedup


def _host_issue(w: Workload, wall_s: float, time_budget_s: float) -> HostIssue:
    """The host's issue time of one call (host_issue.py), the GPU held busy before it."""
    hold = cuda_hold()
    if hold is None:
        return HostIssue(None, 0.0, note="this torch has no sleep kernel to hold the GPU")
    return measure_host_issue(lambda: w.run("timing"), wall_s, time_budget_s, hold,
                              device_sync("cuda"))


class _FirstOutputCheck:
    """The timed call, which also checks the first call's output for NaN/inf: once,
    so the check costs one pass over one output, in a warm-up call the timer discards."""

    def __init__(self, w: Workload) -> None:
        self.w = w
        self.checked = False
        self.warning: str | None = None

    def __call__(self) -> Any:
        out = self.w.run("timing")
        if not self.checked:
            self.checked = True
            try:
                problem = finite.nonfinite_summary(out)
            except Exception as exc:  # an output torch cannot check (sparse, meta...)
                self.warning = f"could not check the output for NaN/inf: {first_line(exc)}"
            else:
                if problem:
                    self.warning = f"the workload's output contains NaN/inf: {problem}"
        return out


def _attempt(what: str, warn: Callable[[str], None], run: Callable[[], T]) -> T | None:
    """An experiment: optional, so an exception it does not record itself becomes a
    warning with its first line, and the diagnosis goes on without it."""
    try:
        return run()
    except Exception as exc:
        warn(f"{what} failed: {first_line(exc)}")
        return None

"""The facade and the orchestration: diagnose() and optimize() hand off to the
pipeline's modules.

diagnose: workload -> (time, count + profile) -> budget -> experiments -> verdict ->
remedies. optimize: diagnose (a share of --budget-s), then the search of
gobrrr.remedies.runner until the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from gobrrr.errors import WARNING
from gobrrr.report import Report
from gobrrr.state import preserved_globals, preserved_state
from gobrrr.workload import Workload, from_callable

__all__ = ["diagnose", "diagnose_workload", "optimize", "optimize_workload",
           "diagnose_budget", "DIAGNOSE_SHARE"]

Progress = Callable[[str], None]
T = TypeVar("T")


def diagnose(fn: Callable[..., Any], *args: Any, kwargs: dict[str, Any] | None = None,
             experiments: bool = True, time_budget_s: float = 2.0,
             eager: Callable[..., Any] | None = None,
             progress: Progress | None = None) -> Report:
    """Diagnose `fn(*args, **kwargs)`: an nn.Module and its inputs, a training-step
    function, any callable. The device is the one its tensors (or parameters) live on.
    The user's parameters, gradients, optimizer state, inputs and RNG are restored.

    `eager`: the same work as eager PyTorch, for a `fn` that replays a CUDA graph (its
    kernels are timed, but a replay runs no op whose FLOPs and bytes could be counted;
    `eager(*args, **kwargs)` is counted instead, never timed).
    time_budget_s: sampling seconds per measurement (timing.measure), not a limit on
    the whole diagnosis; a call longer than it is made 3 times per measurement."""
    w = from_callable(fn, args, kwargs)
    w.eager = eager
    report = diagnose_workload(w, experiments=experiments, time_budget_s=time_budget_s,
                               progress=progress)
    _warn_loudly([n.removeprefix(WARNING) for n in report.notes if n.startswith(WARNING)])
    return report


def _warn_loudly(lines: list[str]) -> None:
    """Failures the run survived (state that could not be restored, NaN outputs, an
    experiment that raised): a Python warning each, so a notebook or script shows them
    (the CLI prints them on stderr)."""
    import warnings

    for line in lines:
        warnings.warn(f"gobrrr: {line}", UserWarning, stacklevel=3)


def diagnose_workload(w: Workload, *, experiments: bool = True, time_budget_s: float = 2.0,
                      progress: Progress | None = None) -> Report:
    from gobrrr import compiled as comp
    from gobrrr.budget import compute_budget
    from gobrrr.counting import count
    from gobrrr.experiments import (
        BatchScaling,
        BatchTimes,
        GraphReplay,
        GraphTiming,
        batch_counts,
        batch_rounds,
        batch_times,
        graph_replay,
        read_batch,
        read_graph,
    )
    from gobrrr.hardware import calibrate
    from gobrrr.profile import profile_counted
    from gobrrr.timing import measure
    from gobrrr.verdict import remedies_for, verdict_for

    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    with preserved_globals():  # calibration must not consume the user's RNG either
        ceil = calibrate(w.device, progress=say)
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
    graph: GraphReplay | None = None
    batch: BatchScaling | None = None
    compile_info: comp.CompileInfo | None = None
    is_compiled = comp.is_compiled(w)
    with preserved_state(w) as state:
        if is_compiled:
            # Compile (and capture) happen here, timed apart: never inside T_wall.
            say("compiled workload: first calls (compile and capture, timed apart)")
            first_s, steady_s, c_before, c_warm = comp.warm_up(w)
        # Every timing first, then the profiled run: a profiler can leave hooks behind
        # that slow later launches, and T_wall must never carry profiler cost.
        say(f"timing {w.name} on {w.device} (warm-up, then repeats)")
        first_output = _FirstOutputCheck(w)
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
        if wall.noisy:
            notes.append(f"wall time is noisy (IQR {100 * wall.rel_iqr:.0f}% of median)")
        if experiments:
            if w.device == "cuda":
                say("experiment: CUDA-graph replay")
            graph_t = _attempt("the CUDA-graph replay experiment", warn, lambda: graph_replay(
                w, wall, lambda f: measure(f, device=w.device, budget_s=time_budget_s)))
            if is_compiled and w.factory is None:
                batch_t = BatchTimes((), "the workload is compiled and has no factory: a "
                                     "2x batch would compile your code again (and can "
                                     "switch it to dynamic shapes)")
            else:
                rounds = batch_rounds(wall.median_s, time_budget_s)
                batch_t = _attempt("the batch-scaling experiment", warn,
                                   lambda: batch_times(w, wall, timer, say, rounds))
            if batch_t is not None and batch_t.skipped:
                notes.append(f"batch scaling skipped: {batch_t.skipped}")
        say("counting FLOPs and bytes per op" + (" in a profiled run" if w.device == "cuda"
                                                 else ", timing each op alone"))
        if is_compiled:
            eager = count(w.run, "counting the eager twin")
            run = comp.profile_compiled(w, wall.median_s, eager)
        else:
            run = profile_counted(w, wall.median_s)
            if not run.counts.records and run.unattributed_s > 0:
                notes.append(comp.graph_replay_note(run, w, count))
        budget = compute_budget(run, wall.median_s, ceil)
        if graph_t is not None:
            graph = read_graph(graph_t, budget)
        if batch_t is not None:
            counts = {1: (run.counts.total_flops, run.counts.total_bytes)}
            if not batch_t.skipped:
                more, batch_t = batch_counts(w, batch_t)
                counts |= more
            for p in batch_t.points:
                if p.error:
                    warn(f"batch scaling at {p.factor}x failed: {p.error}")
            batch = read_batch(batch_t, counts, budget)
    for line in state.warnings:  # what could not be restored of the user's state
        warn(line)
    findings = compile_info.findings() if compile_info else []
    verdict = verdict_for(budget, run.counts, ceil, w.device, batch, graph, findings)
    remedies = remedies_for(budget, run.counts, ceil, w.device, batch, graph,
                            **_facts(w))
    return Report(
        workload=w.to_dict(),
        ceilings=ceil, timing=wall, counts=run.counts, budget=budget, verdict=verdict,
        remedies=remedies, batch=batch, graph=graph,
        diagnose_s=time.perf_counter() - t0, notes=notes + budget.notes,
        state=state, compiled=compile_info,
    )


def _facts(w: Workload) -> dict[str, Any]:
    """What the workload reaches (read only): which remedies can apply to it."""
    from gobrrr.remedies.base import workload_facts
    from gobrrr.state import walk

    reach = walk(w.fn, w.args, w.kwargs)
    return workload_facts(reach.modules, reach.optimizers)


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
            from gobrrr.errors import first_line
            from gobrrr.finite import nonfinite_summary

            self.checked = True
            try:
                problem = nonfinite_summary(out)
            except Exception as exc:  # an output torch cannot check (sparse, meta...)
                self.warning = f"could not check the output for NaN/inf: {first_line(exc)}"
            else:
                if problem:
                    self.warning = f"the workload's output contains NaN/inf: {problem}"
        return out


def _attempt(what: str, warn: Callable[[str], None], run: Callable[[], T]) -> T | None:
    """An experiment: optional, so an exception it does not record itself becomes a
    warning with its first line, and the diagnosis goes on without it."""
    from gobrrr.errors import first_line

    try:
        return run()
    except Exception as exc:
        warn(f"{what} failed: {first_line(exc)}")
        return None


# optimize's diagnosis gets this share of --budget-s: its budget predicts every remedy,
# but only the search that follows measures them.
DIAGNOSE_SHARE = 0.25
# A diagnosis makes at most this many measurements that each sample for time_budget_s
# (timing.measure): the wall time, 2 for the CUDA-graph replay, up to 11 for batch
# scaling (2x and 4x the batch, 3 interleaved rounds). Without the experiments: the
# wall time, with room for counting and profiling the call.
_MEASUREMENTS = {True: 14, False: 3}
# The experiments feed only the batch-size advice and the doctor's evidence: below this
# share of --budget-s (20 s of budget) they are left out.
_EXPERIMENTS_MIN_SHARE_S = 5.0
_TIME_BUDGET_RANGE_S = (0.05, 1.0)  # 1.0: doctor's own default per measurement


def diagnose_budget(budget_s: float) -> tuple[float, bool]:
    """(time_budget_s per measurement, run the experiments) for a diagnosis that should
    take about DIAGNOSE_SHARE of `budget_s`. A workload whose single call is long still
    takes 3 calls per measurement (timing.measure): its diagnosis can take more, and the
    search then gets less."""
    share_s = DIAGNOSE_SHARE * budget_s
    experiments = share_s >= _EXPERIMENTS_MIN_SHARE_S
    lo, hi = _TIME_BUDGET_RANGE_S
    return min(hi, max(lo, share_s / _MEASUREMENTS[experiments])), experiments


def optimize_workload(w: Workload, *, report: Report | None = None, diagnose: bool = True,
                      budget_s: float = 120.0, only: list[str] | None = None,
                      ab_budget_s: float = 1.5, time_budget_s: float | None = None,
                      compile_backend: str = "inductor",
                      extra_specs: list[Any] | None = None,
                      progress: Progress | None = None) -> Any:
    """Diagnose `w` (unless `report` is given or diagnose=False), then search the
    remedies until `budget_s` after this call began: the whole run, diagnosis included,
    ends near that deadline (no candidate starts that cannot finish before it, one still
    timing at it is abandoned). Returns a gobrrr.remedies.result.OptimizeResult.
    time_budget_s: the diagnosis's sampling seconds per measurement (default: from
    `budget_s`, diagnose_budget)."""
    from gobrrr.remedies import catalog
    from gobrrr.remedies.runner import search_workload

    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    catalog.select(only)  # an unknown name fails now, not after the diagnosis
    if report is None and diagnose:
        per_measurement_s, experiments = diagnose_budget(budget_s)
        say(f"diagnosing first (~{DIAGNOSE_SHARE:.0%} of --budget-s {budget_s:g} s): the "
            "predictions come from its budget")
        report = diagnose_workload(
            w, experiments=experiments, progress=say,
            time_budget_s=per_measurement_s if time_budget_s is None else time_budget_s)
    diagnose_s = time.perf_counter() - t0
    result = search_workload(w, deadline=deadline, report=report, only=only,
                             ab_budget_s=ab_budget_s, compile_backend=compile_backend,
                             extra_specs=extra_specs, progress=say)
    result.diagnose_s, result.budget_s = diagnose_s, budget_s
    result.optimize_s = time.perf_counter() - t0
    return result


def optimize(fn: Callable[..., Any], *args: Any, kwargs: dict[str, Any] | None = None,
             budget_s: float = 120.0, only: list[str] | None = None,
             diagnose: bool = True, report: Report | None = None,
             progress: Progress | None = None) -> Any:
    """Apply the essay's remedies to copies of `fn(*args, **kwargs)`, verify outputs and
    speed, and rank them, within `budget_s` seconds for the whole run (diagnosis
    included). Returns a gobrrr.remedies.result.OptimizeResult: call it to run the best
    verified configuration (on gobrrr's copy of the model); `.table()` lists predicted
    vs measured for every remedy; `.snippet` is the code to apply it. The user's objects
    are never changed."""
    result = optimize_workload(from_callable(fn, args, kwargs), report=report,
                               diagnose=diagnose, budget_s=budget_s, only=only,
                               progress=progress)
    _warn_loudly([n.removeprefix(WARNING) for n in result.notes if n.startswith(WARNING)])
    return result

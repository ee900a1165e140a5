"""The facade: diagnose() and optimize() hand off to the pipeline's modules.

diagnose: the live source (live.py: time, count + profile, experiments) -> the one end
(diagnosis.py: budget, verdict, remedies, Report). optimize: diagnose (a share of
--budget-s), then the search of gobrrr.remedies.runner until the deadline. Under
torchrun (WORLD_SIZE > 1) both choose the distributed path themselves, here below the
CLI: every rank in lockstep (gobrrr.dist.diagnose, gobrrr.dist.optimize).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gobrrr.diagnosis import report_for
from gobrrr.dist.diagnose import DistOptions, diagnose_distributed
from gobrrr.dist.lockstep import World, timeout_from_env
from gobrrr.dist.optimize import DistOptimizeOptions, optimize_distributed
from gobrrr.errors import WARNING
from gobrrr.generation_detect import find_generation
from gobrrr.live import measure_live
from gobrrr.remedies import catalog
from gobrrr.remedies.plan import DIAGNOSE_SHARE, diagnose_budget
from gobrrr.remedies.runner import PROBE_OVERRUN, prestart, search_workload
from gobrrr.remedies.verify import AB_BUDGET_S
from gobrrr.report import Report
from gobrrr.state import preserved_state
from gobrrr.workload import Workload, from_callable

if TYPE_CHECKING:
    from gobrrr.remedies.compile_child import ChildRun

__all__ = ["diagnose", "diagnose_workload", "optimize", "optimize_workload"]

Progress = Callable[[str], None]


def diagnose(fn: Callable[..., Any], *args: Any, kwargs: dict[str, Any] | None = None,
             experiments: bool = True, time_budget_s: float = 2.0,
             eager: Callable[..., Any] | None = None,
             progress: Progress | None = None) -> Report:
    """Diagnose `fn(*args, **kwargs)`: an nn.Module and its inputs, a training-step
    function, any callable. The device is the one its tensors (or parameters) live on.
    The user's parameters, gradients, optimizer state, inputs and RNG are restored.

    Inside a torchrun script (WORLD_SIZE > 1) every rank must call it with the same
    workload: the ranks are diagnosed in lockstep (gobrrr.dist.diagnose), communication
    becomes the fourth part, and rank 0's report carries the merged `distributed` section
    and the DDP/FSDP2 remedies; each other rank gets its own report.

    `eager`: the same work as eager PyTorch, for a `fn` that replays a CUDA graph (its
    kernels are timed, but a replay runs no op whose FLOPs and bytes could be counted;
    `eager(*args, **kwargs)` is counted instead, never timed).
    time_budget_s: sampling seconds per measurement (timing.measure), not a limit on
    the whole diagnosis; a call longer than it is made 3 times per measurement."""
    w = from_callable(fn, args, kwargs)
    w.eager = eager
    world = World.from_env()
    if world is not None and world.size > 1:
        report = diagnose_distributed(
            world, _fingerprint(fn), w.device, lambda: w,
            DistOptions(time_budget_s=time_budget_s, timeout_s=timeout_from_env(),
                        experiments=experiments), progress=progress)
    elif (found := find_generation(w)) is not None:
        # a callable that calls model.generate: prefill and decode apart
        from gobrrr.generation_run import diagnose_generation  # the trace source: heavy

        report = diagnose_generation(found.model, found.input_ids, found.new_tokens,
                                     name=w.name, progress=progress,
                                     experiments=experiments)
        report.notes.insert(0, found.note())
    else:
        report = diagnose_workload(w, experiments=experiments, time_budget_s=time_budget_s,
                                   progress=progress)
    _warn_loudly([n.removeprefix(WARNING) for n in report.notes if n.startswith(WARNING)])
    return report


def _fingerprint(fn: Callable[..., Any]) -> str:
    """What every rank must agree it runs (a callable from Python: its qualified name)."""
    target = getattr(fn, "__func__", fn)
    return (f"python:{getattr(target, '__module__', '?')}."
            f"{getattr(target, '__qualname__', type(fn).__qualname__)}")


def _warn_loudly(lines: list[str]) -> None:
    """Failures the run survived (state that could not be restored, NaN outputs, an
    experiment that raised): a Python warning each, so a notebook or script shows them
    (the CLI prints them on stderr)."""
    import warnings

    for line in lines:
        warnings.warn(f"gobrrr: {line}", UserWarning, stacklevel=3)


def diagnose_workload(w: Workload, *, experiments: bool = True, time_budget_s: float = 2.0,
                      progress: Progress | None = None) -> Report:
    """The live source (live.py), then the one end (diagnosis.py)."""
    m = measure_live(w, experiments=experiments, time_budget_s=time_budget_s,
                     progress=progress)
    return report_for(m.run, m.ceilings, experiments=m.experiments, compiled=m.compiled,
                      state=m.state, facts=m.facts, started_s=m.started_s, memory=m.memory)


def optimize_workload(w: Workload, *, report: Report | None = None, diagnose: bool = True,
                      budget_s: float = 120.0, only: list[str] | None = None,
                      ab_budget_s: float = AB_BUDGET_S, time_budget_s: float | None = None,
                      compile_backend: str = "inductor",
                      extra_specs: list[Any] | None = None,
                      started_s: float | None = None,
                      progress: Progress | None = None,
                      prestarted: ChildRun | None = None) -> Any:
    """Diagnose `w` (unless `report` is given or diagnose=False), then search the
    remedies until `budget_s` after the run began: the whole run, diagnosis included,
    ends near that deadline (no candidate starts that cannot finish before it, one still
    timing at it is abandoned). Returns a gobrrr.remedies.result.OptimizeResult.
    started_s: when the run began (a time.perf_counter() value), for a caller that spent
    part of the budget before this call (the CLI: its imports and the workload's build,
    the result's `setup_s`); None: this call. The diagnosis's share is of what is left.
    time_budget_s: the diagnosis's sampling seconds per measurement (default: from
    the budget left, diagnose_budget). prestarted: the background compile's child
    (runner.prestart) a caller started before building `w` (the CLI); stopped here."""
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    setup_s = 0.0 if started_s is None else max(0.0, t0 - started_s)
    deadline = t0 - setup_s + budget_s
    left_s = max(0.0, budget_s - setup_s)
    catalog.select(only)  # an unknown name fails now, not after the diagnosis
    notes: list[str] = []
    if started_s is not None:  # said once: why the search gets less than --budget-s
        if left_s > 0:
            say(f"importing and building the workload took {setup_s:.1f} s of --budget-s "
                f"{budget_s:g}: the diagnosis and the search share the {left_s:.1f} s left")
        else:
            notes.append(f"{WARNING}importing and building the workload took "
                         f"{setup_s:.1f} s, all of --budget-s {budget_s:g}: the budget was "
                         "spent before the search began, with no time left to measure a "
                         "remedy")
            say(notes[-1].removeprefix(WARNING))
    # the background compile's child builds the workload while the diagnosis runs
    child = prestarted
    if child is None and left_s > 0:
        child = prestart(w.reload, w.device, only, ab_budget_s, extra_specs)
    try:
        if report is None and diagnose:
            per_measurement_s, experiments = diagnose_budget(left_s)
            of = (f"of --budget-s {budget_s:g} s" if started_s is None
                  else f"of the {left_s:.0f} s left of --budget-s {budget_s:g}")
            say(f"diagnosing first (~{DIAGNOSE_SHARE:.0%} {of}): the predictions come from "
                "its budget")
            report = diagnose_workload(
                w, experiments=experiments, progress=say,
                time_budget_s=per_measurement_s if time_budget_s is None else time_budget_s)
        diagnose_s = time.perf_counter() - t0
        result = search_workload(w, deadline=deadline, report=report, only=only,
                                 ab_budget_s=ab_budget_s, compile_backend=compile_backend,
                                 extra_specs=extra_specs, progress=say, prestarted=child,
                                 overrun_s=PROBE_OVERRUN * budget_s)
    finally:
        if child is not None:
            child.stop()
    result.notes[:0] = notes
    result.diagnose_s, result.budget_s, result.setup_s = diagnose_s, budget_s, setup_s
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
    are never changed.

    Inside a torchrun script (WORLD_SIZE > 1) every rank must call it with the same
    workload, a DDP-wrapped model's step: the DDP remedies run on copies in lockstep
    (gobrrr.dist.optimize); rank 0 gets the result, the other ranks None. FSDP2's
    remedies need a fresh build per candidate: use the CLI with a factory target."""
    w = from_callable(fn, args, kwargs)
    world = World.from_env()
    if world is not None and world.size > 1:
        with preserved_state(w):  # the base is primed with one step of the user's model
            result = optimize_distributed(
                world, _fingerprint(fn), w.device, lambda: w,
                DistOptimizeOptions(budget_s=budget_s, timeout_s=timeout_from_env(),
                                    diagnose=diagnose, only=only, fresh_builds=False),
                progress=progress)
        if result is None:
            return None
    else:
        result = optimize_workload(w, report=report, diagnose=diagnose, budget_s=budget_s,
                                   only=only, progress=progress)
    _warn_loudly([n.removeprefix(WARNING) for n in result.notes if n.startswith(WARNING)])
    return result

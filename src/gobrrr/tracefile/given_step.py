"""A step time the user measured without the profiler (`gobrrr analyze --step-ms`), put
in place of the traced steps' span as T_wall.

Why: a trace's steps ran under the profiler, which adds host time to every op it records
(more with record_shapes, more again in torch.compile's calls), so where the host bounds
the step the traced span overstates T_wall and the overhead read from it is an upper
bound. The kernels' own times are the same under the profiler (the H200 set of
benchmarks/results/h200/session-2026-12-04s: GPT-2 small's training step ran 27.2 ms of
kernels in a 51.5 ms traced step and 35.1 ms unprofiled). The step time a training log
already prints (it/s) is the unprofiled T_wall doctor would time: with it, overhead is
T_wall less the trace's busy time, as doctor splits it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from gobrrr.errors import UserError
from gobrrr.run import MeasuredRun
from gobrrr.timing import from_samples

__all__ = ["with_given_step", "given_step_note"]

# A CUDA step's kernels run at their traced times unprofiled; a given step this much
# shorter than them cannot be the traced program's (the budget scales op times that
# overrun T_wall by less, as noise between two runs).
SHORTEST_OF_BUSY = 0.9


def given_step_note(step_s: float, traced_s: float) -> str:
    """The note that replaces the profiled-span note when the step time was given."""
    ratio = traced_s / step_s if step_s > 0 else math.inf
    return (f"T_wall {step_s * 1e3:.4g} ms per step, as given (--step-ms: the step's time "
            f"measured without the profiler); the trace's steps took {traced_s * 1e3:.4g} "
            f"ms ({ratio:.2f}x: the profiler's host cost, and any difference between the "
            "two runs); op and kernel times and counts come from the trace")


def with_given_step(run: MeasuredRun, step_s: float,
                    about_traced_wall: Callable[[str], bool],
                    where: str = "the trace") -> MeasuredRun:
    """`run` (a trace's) with T_wall `step_s`; its notes on the traced T_wall
    (`about_traced_wall`) give way to one on the given step, where the first of them was.
    A CUDA step shorter than SHORTEST_OF_BUSY of its kernels' busy time is refused (one
    line); a CPU trace's op times carry the profiler's cost, so its busy time may exceed
    the given step (the budget scales them down and says so)."""
    if not math.isfinite(step_s) or step_s <= 0:
        raise UserError(f"--step-ms must be a positive number of milliseconds, not "
                        f"{step_s * 1e3:g}")
    busy_s = sum(run.profile.op_time_s.values()) + run.profile.unattributed_s
    if run.device == "cuda" and step_s < SHORTEST_OF_BUSY * busy_s:
        raise UserError(f"--step-ms {step_s * 1e3:g} is shorter than the {busy_s * 1e3:.4g} "
                        f"ms of device work per step in {where}: kernels take the same "
                        "time with or without the profiler, so this is not the traced "
                        "program's step time")
    at = next((i for i, n in enumerate(run.notes) if about_traced_wall(n)), len(run.notes))
    notes = [n for n in run.notes[:at] if not about_traced_wall(n)]
    notes += [given_step_note(step_s, run.wall_s)]
    notes += [n for n in run.notes[at:] if not about_traced_wall(n)]
    if step_s > run.wall_s:
        notes.append(f"the given step ({step_s * 1e3:.4g} ms) is longer than the traced "
                     f"steps ({run.wall_s * 1e3:.4g} ms): the difference is read as "
                     "overhead (work outside the traced calls, or a slower run)")
    workload = dict(run.workload)
    if isinstance(workload.get("trace"), dict):
        workload["trace"] = dict(workload["trace"]) | {"step_given_s": step_s,
                                                       "traced_step_s": run.wall_s}
    return replace(run, wall_s=step_s, timing=from_samples([step_s]), notes=notes,
                   workload=workload)

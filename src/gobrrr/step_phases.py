"""The report's `phases`: one step's wall time split by phase (phases.py), each with
`seconds` and `share` of T_wall, summing to T_wall.

- each op phase (forward, backward, optimizer, compiled, prefill, a record_function
  name...): the busy time of its ops, as the budget rolled it up (Budget.per_phase:
  device time on CUDA, execution time on CPU);
- data loading: the measured wait for the next batch with the device idle
  (Budget.data_loading_s), where a DataLoader was seen; the data loader's own ops
  (collate) run inside that wait, so their busy time is not added again;
- outside any op: busy time the budget holds outside every counted op (kernels no
  counted op launched, on CUDA), where there is any;
- communication (a torchrun job): the exposed communication the budget's fourth part
  holds (transfer and waiting for a late rank, none of it hidden behind compute);
- other host time (phases.OTHER_HOST): the rest of T_wall, host time in no phase's ops
  (Python, dispatch, launches; on CUDA, the GPU idle for them).

The op phases' times come from the profiled or counted step and T_wall from the
unprofiled timer: where they sum past T_wall, other host time is 0 and the shares sum
past 1 (the note of the budget says the op times were scaled, or the profiler's cost).
"""

from __future__ import annotations

from typing import Any

from gobrrr.budget import Budget
from gobrrr.phases import COMMUNICATION, DATA_LOADING, OTHER_HOST

__all__ = ["step_phases", "OUTSIDE_OPS"]

OUTSIDE_OPS = "outside any op"


def step_phases(b: Budget) -> dict[str, dict[str, Any]]:
    """{phase: {"seconds", "share", "source"}} for one step (module docstring), largest
    first with other host time last."""
    wall = b.wall_s
    rows: dict[str, tuple[float, str]] = {}
    loader_ops_s = 0.0
    # the rows keep their measured times; where the budget scaled its busy time down to
    # fit a measured wait (with_communication, with_data_loading), the phases follow it
    rows_s = sum(r.time_s for r in b.per_phase)
    k = min(1.0, b.busy_s / rows_s) if rows_s > 0 else 1.0
    for r in b.per_phase:
        if r.name == DATA_LOADING:
            loader_ops_s = r.time_s * k
        else:
            rows[r.name] = (r.time_s * k, "busy time of its ops")
    if b.data_loading_s is not None:
        rows[DATA_LOADING] = (b.data_loading_s, "the wait for the next batch, device idle")
    elif loader_ops_s > 0:  # a DataLoader's ops counted, no wait measured around them
        rows[DATA_LOADING] = (loader_ops_s, "busy time of the data loader's ops")
    outside = b.busy_s - rows_s * k
    if outside > 1e-3 * wall:  # float dust of the sums is not a phase
        rows[OUTSIDE_OPS] = (outside, "busy time outside every counted op")
    if b.communication_s:
        rows[COMMUNICATION] = (b.communication_s, "exposed communication (transfer and "
                               "waiting), not hidden behind compute")
    ordered = dict(sorted(rows.items(), key=lambda kv: -kv[1][0]))
    other = max(0.0, wall - sum(t for t, _ in ordered.values()))
    ordered[OTHER_HOST] = (other, "T_wall minus the phases above")
    return {name: {"seconds": t, "share": t / wall if wall > 0 else 0.0, "source": src}
            for name, (t, src) in ordered.items()}

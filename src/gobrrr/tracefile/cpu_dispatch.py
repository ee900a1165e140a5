"""The recorded duration of an empty op on this CPU: what a CPU trace's op events hold
besides the op's work (dispatch, argument checks, the output's allocation).

doctor's CPU path (profile._cpu_timed) times each op alone and subtracts the cost of an
empty op called the same way: dispatch, not execution. A trace's op event spans the op
inside the dispatcher, so `analyze` subtracts the same thing as recorded: the median
duration of `aten::add_` on a 1-element tensor under torch.profiler (CPU activity, shapes
recorded), measured here once per process. Without it a chain of tiny ops read as
memory-bound (64 adds on 16 elements: analyze memory 0.67, doctor overhead 0.84, this
2-core CPU, 2026-12-03). A trace recorded on another machine is corrected by this one's
cost: approximate, and the note says which was used.
"""

from __future__ import annotations

import functools
import statistics

__all__ = ["empty_op_us"]

CALLS = 200


@functools.cache
def empty_op_us() -> float:
    """Median recorded duration (us) of an empty aten op on this CPU (module docstring)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    s = torch.zeros(1)
    for _ in range(20):  # warm: the first calls allocate and look up kernels
        s.add_(1.0)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(CALLS):
            s.add_(1.0)
    durs = [e.time_range.elapsed_us() for e in prof.events() if e.name == "aten::add_"]
    return float(statistics.median(durs)) if durs else 0.0

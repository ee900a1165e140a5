"""Experiments that bound communication by removing it: the same step under DDP's
`no_sync()` (gradients accumulate locally, no all-reduce) vs with sync, timed in lockstep
on every rank, interleaved (sync, no_sync, sync, no_sync) so that drift on a shared
machine hits both alike.

T_sync - T_no_sync is an upper bound on exposed communication, not a measurement of it:
no_sync also removes DDP's own work around the all-reduce (copying gradients into and out
of its flat buckets, dividing by the world size) and, on a GPU, the slowdown of compute
kernels that share SMs with NCCL's kernels (on a CPU, gloo's threads share the cores).
The report shows it beside the trace's exposed communication, and the gap between the
two is that work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gobrrr.dist.lockstep import Lockstep, measure_lockstep

__all__ = ["NoSync", "find_ddp", "no_sync_times", "ROUNDS"]

ROUNDS = 2  # interleaved (sync, no_sync) pairs


@dataclass(frozen=True)
class NoSync:
    """One rank's reading; `skipped` says why there is none."""

    sync_s: float | None = None
    no_sync_s: float | None = None
    skipped: str | None = None

    @property
    def bound_s(self) -> float | None:
        """T_sync - T_no_sync: the upper bound on exposed communication per call."""
        if self.sync_s is None or self.no_sync_s is None:
            return None
        return max(0.0, self.sync_s - self.no_sync_s)

    @property
    def bound_fraction(self) -> float | None:
        b = self.bound_s
        return b / self.sync_s if b is not None and self.sync_s else None

    def to_dict(self) -> dict[str, Any]:
        return {"sync_s": self.sync_s, "no_sync_s": self.no_sync_s,
                "bound_s": self.bound_s, "bound_fraction": self.bound_fraction,
                "skipped": self.skipped}


def find_ddp(w: Any) -> Any:
    """The DistributedDataParallel module the workload reaches (state.walk), or None."""
    from torch.nn.parallel import DistributedDataParallel

    from gobrrr.state import walk

    reach = walk(w.fn, w.args, w.kwargs)
    return next((m for m in reach.modules if isinstance(m, DistributedDataParallel)), None)


def no_sync_times(w: Any, ls: Lockstep, budget_s: float) -> NoSync:
    """The step with and without DDP's gradient sync, in lockstep (module docstring).
    Every rank must find a DDP module, or every rank skips: a rank that ran under
    no_sync while a peer synced would wait forever in the all-reduce."""
    ddp = find_ddp(w)
    found = ls.all_gather(ddp is not None, "looking for a DDP module")
    if not all(found):
        return NoSync(skipped="no DistributedDataParallel module reachable from the "
                              "workload on " + ("any rank" if not any(found) else
                                                "every rank") + " (FSDP2: not done yet)")
    sync: list[float] = []
    nosync: list[float] = []
    share = budget_s / (2 * ROUNDS)
    for _ in range(ROUNDS):
        t, _all = measure_lockstep(lambda: w.run("the no_sync experiment"), ls,
                                   device=w.device, budget_s=share)
        sync.append(t.median_s)
        with ddp.no_sync():
            t, _all = measure_lockstep(lambda: w.run("the no_sync experiment"), ls,
                                       device=w.device, budget_s=share)
        nosync.append(t.median_s)
    # The lower of the rounds' medians, for both: the round least disturbed by other
    # processes on a shared machine.
    return NoSync(min(sync), min(nosync))

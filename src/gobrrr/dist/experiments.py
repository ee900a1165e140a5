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

FSDP2 (`fully_shard`) has no no_sync(): `set_requires_gradient_sync(False)` alone skips
the reduce-scatter but still all-gathers every unit's parameters in the forward and the
backward. A step without communication keeps the parameters unsharded: on every FSDP
unit `set_reshard_after_forward(False)`, `set_reshard_after_backward(False)`,
`set_requires_gradient_sync(False)`, then `unshard()` once (the one all-gather, outside
the timing); the step then finds its parameters gathered and issues no collective
(checked: the trace of such a step on gloo holds no gloo range). Besides the
communication this removes FSDP2's copies into and out of its all-gather and
reduce-scatter buffers, the freeing and re-allocating of the unsharded parameters, and
the optimizer's update of the shards (no gradient reaches them: SGD skips a parameter
without one; an elementwise pass over 1/n of the parameters), so it too is an upper
bound. Afterwards every unit's settings are put back as they were, the unsharded
gradients accumulated meanwhile dropped, and the parameters resharded: the workload is
left as it was (`fsdp_settings` reads what is restored; a test compares them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gobrrr.dist.lockstep import Lockstep
from gobrrr.remedies.fsdp import find_fsdp
from gobrrr.state import walk
from gobrrr.timing import measure

__all__ = ["NoSync", "find_ddp", "find_fsdp_units", "fsdp_settings", "no_sync_times",
           "ROUNDS", "DDP_METHOD", "FSDP_METHOD"]

ROUNDS = 2  # interleaved (sync, no_sync) pairs
DDP_METHOD = "DDP no_sync()"
FSDP_METHOD = "FSDP2 parameters kept unsharded"


@dataclass(frozen=True)
class NoSync:
    """One rank's reading; `skipped` says why there is none."""

    sync_s: float | None = None
    no_sync_s: float | None = None
    skipped: str | None = None
    method: str = DDP_METHOD  # how communication was removed: DDP_METHOD or FSDP_METHOD

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
                "skipped": self.skipped, "method": self.method}


def find_ddp(w: Any) -> Any:
    """The DistributedDataParallel module the workload reaches (state.walk), or None."""
    from torch.nn.parallel import DistributedDataParallel


    reach = walk(w.fn, w.args, w.kwargs)
    return next((m for m in reach.modules if isinstance(m, DistributedDataParallel)), None)


def find_fsdp_units(w: Any) -> list[Any]:
    """Every FSDP2 module (fully_shard) the workload reaches, in module order."""

    return find_fsdp(list(walk(w.fn, w.args, w.kwargs).modules))


# FSDPParamGroup's attributes that the public setters change (torch 2.6-2.13): read to
# put back exactly what was there (the root's post_forward_mesh_info is None whatever
# reshard_after_forward said: FSDP2 keeps the root gathered for the backward)
_GROUP_ATTRS = ("post_forward_mesh_info", "reshard_after_backward", "reduce_grads",
                "all_reduce_grads")


def _group(unit: Any) -> Any:
    return unit._get_fsdp_state()._fsdp_param_group  # None: a unit with no parameters


def fsdp_settings(units: list[Any]) -> list[dict[str, Any]]:
    """Each unit's FSDP2 settings (the attributes the setters change), to restore and to
    compare; a unit without parameters has none."""
    out = []
    for u in units:
        g = _group(u)
        state = u._get_fsdp_state()
        out.append({"auto_reshard_after_forward":
                    getattr(state, "_auto_reshard_after_forward", None)}
                   | ({} if g is None else {a: getattr(g, a) for a in _GROUP_ATTRS
                                            if hasattr(g, a)}))
    return out


def _restore_fsdp(units: list[Any], saved: list[dict[str, Any]]) -> None:
    for u, s in zip(units, saved, strict=True):
        g = _group(u)
        if s.get("auto_reshard_after_forward") is not None:
            u._get_fsdp_state()._auto_reshard_after_forward = s["auto_reshard_after_forward"]
        if g is None:
            continue
        for a in _GROUP_ATTRS:
            if a in s:
                setattr(g, a, s[a])
        # the gradients accumulated unsharded (no reduce-scatter ran): dropped, or the
        # next step would reduce-scatter them with its own
        for fp in g.fsdp_params:
            fp.unsharded_accumulated_grad = None
            if hasattr(fp, "_unsharded_param"):
                fp._unsharded_param.grad = None
    for u in units:
        u.reshard()


def _unsharded(units: list[Any]) -> None:
    for u in units:
        u.set_reshard_after_forward(False, recurse=False)
        u.set_reshard_after_backward(False, recurse=False)
        u.set_requires_gradient_sync(False, recurse=False)
    for u in units:
        u.unshard()  # the one all-gather, every rank alike, outside the timing


def no_sync_times(w: Any, ls: Lockstep, budget_s: float) -> NoSync:
    """The step with and without communication, in lockstep (module docstring): DDP's
    no_sync(), or FSDP2's parameters kept unsharded. Every rank must find the same kind,
    or every rank skips: a rank that ran without communication while a peer synced
    would wait forever in the collective."""
    import contextlib

    ddp = find_ddp(w)
    units = [] if ddp is not None else find_fsdp_units(w)
    kind = "ddp" if ddp is not None else "fsdp" if units else None
    found = ls.all_gather(kind, "looking for a DDP or FSDP2 module")
    if len(set(found)) > 1 or kind is None:
        return NoSync(skipped="no DistributedDataParallel or FSDP2 (fully_shard) module "
                              "reachable from the workload on " +
                              ("any rank" if not any(found) else "every rank alike"))
    sync: list[float] = []
    nosync: list[float] = []
    share = budget_s / (2 * ROUNDS)

    def timed() -> float:
        return measure(lambda: w.run("the no_sync experiment"), device=w.device,
                       budget_s=share, coordinator=ls).median_s

    for _ in range(ROUNDS):
        sync.append(timed())
        if ddp is not None:
            with ddp.no_sync():
                nosync.append(timed())
            continue
        saved = fsdp_settings(units)
        with contextlib.ExitStack() as stack:
            stack.callback(_restore_fsdp, units, saved)
            _unsharded(units)
            nosync.append(timed())
    # The lower of the rounds' medians, for both: the round least disturbed by other
    # processes on a shared machine.
    return NoSync(min(sync), min(nosync),
                  method=DDP_METHOD if ddp is not None else FSDP_METHOD)

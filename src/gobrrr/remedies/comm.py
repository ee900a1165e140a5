"""What the distributed remedies (ddp.py, fsdp.py) read beyond the budget: the facts of
a torchrun job's communication, and the arithmetic they share.

Predictions are deliberately simple and approximate (docs/multigpu.md: remedies); the
measured A/B gain is what decides. With T the step time (the budget's total), E the
exposed communication per step (the budget's fourth part, rank 0's), X the part of E
that is transfer (E less rank 0's waiting for a late rank: no change to the bytes or the
buckets moves the waiting, which goes with the straggler's own step), G the gradient
bytes (fp32: 4 per parameter) and W the calibrated memory bandwidth (the ceilings'):
- larger batch (advice, DDP and FSDP2): the gradients (FSDP2: also the parameters), so
  the transfers, stay while the rest of the step, the waiting included, doubles:
  T(2B) ~ 2(T - X) + X.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gobrrr.gains import Gain, gain_from_saved
from gobrrr.remedies.base import Context
from gobrrr.units import fmt_s

__all__ = ["CommFacts", "step_s", "exposed_s", "transfer_s", "waiting_note", "comm_gain",
           "applies_to", "predict_batch", "BATCH_ADVICE_MIN"]

# A larger batch is advised from this gain in samples per second.
BATCH_ADVICE_MIN = 1.1


@dataclass(frozen=True)
class CommFacts:
    """The communication facts of a torchrun job (dist/context.py builds them on rank 0
    from the merged section and the model): what Context.comm holds."""

    kind: str  # "ddp" | "fsdp"
    world_size: int
    grad_bytes: tuple[int, ...]  # per parameter requiring grad, registration order
    # all-reduce bus bandwidth by message size: from calibrate --distributed's curve when
    # cached (size-dependent: it holds the per-call latency), else this step's achieved
    busbw: Callable[[float], float] | None = None
    busbw_source: str = ""
    no_sync_bound_s: float | None = None  # U: T_sync - T_no_sync, max over ranks
    bucket_cap_mb: float | None = None  # the workload's own (None: DDP's default)
    param_bytes: int = 0  # FSDP2: unsharded parameter bytes (all-gathered per pass)
    # rank 0's exposed waiting for a late rank per step: in E, moved by no remedy of the
    # bytes or the buckets (a straggler on the H200: 41.3 ms of a 41.8 ms E)
    waiting_s: float = 0.0

    @property
    def total_grad_bytes(self) -> int:
        return sum(self.grad_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "world_size": self.world_size,
                "grad_bytes": self.total_grad_bytes, "params": len(self.grad_bytes),
                "busbw_source": self.busbw_source, "no_sync_bound_s": self.no_sync_bound_s,
                "bucket_cap_mb": self.bucket_cap_mb, "param_bytes": self.param_bytes,
                "waiting_s": self.waiting_s}


def step_s(ctx: Context) -> float:
    """T: the step's time, the budget's total."""
    return ctx.budget.total_s if ctx.budget is not None else 0.0


def exposed_s(ctx: Context) -> float:
    """E: the exposed communication per step (0 without a distributed budget)."""
    b = ctx.budget
    return b.communication_s or 0.0 if b is not None else 0.0


def transfer_s(ctx: Context) -> float:
    """X: the exposed communication less the waiting for a late rank (module docstring)."""
    waiting = ctx.comm.waiting_s if ctx.comm is not None else 0.0
    return max(0.0, exposed_s(ctx) - waiting)


def waiting_note(ctx: Context) -> str:
    """What the basis says of the waiting left out of X, or nothing."""
    waiting = ctx.comm.waiting_s if ctx.comm is not None else 0.0
    return "" if waiting <= 0 else (
        f" (the exposed {fmt_s(exposed_s(ctx))} less {fmt_s(waiting)} of waiting for a "
        "late rank, which this does not move)")


# A saving under this share of the step is float rounding of two equal models (a bucket
# cap that leaves the buckets as they are), not a gain.
NO_GAIN_FRACTION = 1e-9


def comm_gain(ctx: Context, saved_s: float, part: str, basis: str) -> Gain:
    """`saved_s` of the budget's `part` (at most what that part holds), or no gain."""
    if ctx.budget is None or saved_s <= NO_GAIN_FRACTION * step_s(ctx):
        return Gain.none(f"predicted no gain: {basis}")
    return gain_from_saved(ctx.budget, {part: saved_s}, basis)


def applies_to(kind: str) -> Callable[[Context], str | None]:
    """`applies` for the remedies of a DDP ("ddp") or FSDP2 ("fsdp") job."""
    what = {"ddp": "a DistributedDataParallel", "fsdp": "an FSDP2 (fully_shard)"}[kind]

    def applies(ctx: Context) -> str | None:
        comm = ctx.comm
        if comm is None:
            return f"needs {what} model under torchrun (gobrrr doctor --nproc-per-node N)"
        if comm.kind != kind:
            return f"the job wraps its model in {comm.kind.upper()}, not {kind.upper()}"
        return None

    return applies


def predict_batch(ctx: Context) -> Gain:
    """Throughput at 2x the per-GPU batch: T(2B) ~ 2(T - X) + X (module docstring)."""
    t, e = step_s(ctx), transfer_s(ctx)
    if t <= 0 or ctx.comm is None:
        return Gain.none("no step time")
    t2 = 2 * (t - e) + e
    what = ("the parameters and gradients (and so the all-gathers and reduce-scatters)"
            if ctx.comm.kind == "fsdp" else "the gradients (and so the all-reduce)")

    basis = (f"{what} stay while the rest of the step "
             f"doubles: 2x batch in ~{fmt_s(t2)} vs 2 x {fmt_s(t)}, {2 * t / t2:.2f}x "
             f"samples per second; transfer {e / t:.0%} -> {e / t2:.0%} of the step"
             f"{waiting_note(ctx)} (throughput, not latency; approximate: assumes the "
             "rest scales linearly)")
    if 2 * t / t2 < BATCH_ADVICE_MIN:
        return Gain.none(basis + f", under the {BATCH_ADVICE_MIN}x worth advising")
    return Gain(2 * t / t2, basis)

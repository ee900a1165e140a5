"""Batch size: advice only, never applied (a bigger batch changes the training
dynamics and the memory footprint, which only the user can judge).

Predicted throughput change from the diagnose batch-scaling experiment: 2x the batch in
T(2B)/T(B) the time gives 2 / (T(2B)/T(B)) x the samples per second (the essay: an
overhead-bound step gets the extra samples almost free).
"""

from __future__ import annotations

from gobrrr.remedies.base import (
    STAGE_MUTATE,
    Candidate,
    Context,
    RemedySpec,
)

__all__ = ["SPEC"]


def _applies(ctx: Context) -> str | None:
    rep = ctx.report
    if rep is None or rep.batch is None:
        return "no batch-scaling experiment (diagnose skipped or ran without experiments)"
    if not rep.batch.time_ratio:
        return rep.batch.skipped or rep.batch.reading or "the 2x batch did not run"
    return None


def _predict(ctx: Context) -> tuple[float | None, str]:
    rep = ctx.report
    if rep is None or rep.batch is None or not rep.batch.time_ratio:
        return None, "no batch-scaling measurement"
    ratio = rep.batch.time_ratio
    return 2 / ratio, (f"2x batch took {ratio:.2f}x the time: {2 / ratio:.2f}x samples "
                       "per second (throughput, not latency)")


def _never(cand: Candidate, ctx: Context) -> Candidate:
    raise RuntimeError("batch size is advice only; it is never applied")


SPEC = RemedySpec(
    "batch_size", "batch", "overhead", STAGE_MUTATE, "batch", _applies, _predict, _never,
    "# double the batch if memory and convergence allow (throughput, not latency)",
    advice_only=True,
)

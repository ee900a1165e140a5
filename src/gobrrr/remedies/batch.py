"""Batch size: advice only, never applied (a bigger batch changes the training
dynamics and the memory footprint, which only the user can judge).

Predicted throughput change from the diagnose batch-scaling experiment: 2x the batch in
T(2B)/T(B) the time gives 2 / (T(2B)/T(B)) x the samples per second (the essay: an
overhead-bound step gets the extra samples almost free).
"""

from __future__ import annotations

from gobrrr.gains import Gain
from gobrrr.remedies.base import (
    STAGE_MUTATE,
    Candidate,
    Context,
    RemedySpec,
)

__all__ = ["SPEC"]


# Advice only when doubling the batch buys at least 10% more samples per second: below
# that, the gain is within what a bigger batch's other costs (memory, convergence) eat.
MIN_ADVICE_GAIN = 1.1


def _applies(ctx: Context) -> str | None:
    if ctx.batch is None:
        return "no batch-scaling experiment (diagnose skipped or ran without experiments)"
    if not ctx.batch.time_ratio:
        return ctx.batch.skipped or ctx.batch.reading or "the 2x batch did not run"
    return None


def _predict(ctx: Context) -> Gain:
    if ctx.batch is None or not ctx.batch.time_ratio:
        return Gain.none("no batch-scaling measurement")
    ratio = ctx.batch.time_ratio
    basis = (f"2x batch took {ratio:.2f}x the time: {2 / ratio:.2f}x samples per second "
             "(throughput, not latency)")
    if 2 / ratio < MIN_ADVICE_GAIN:
        return Gain.none(basis + f", under the {MIN_ADVICE_GAIN:.1f}x worth advising")
    return Gain(2 / ratio, basis)  # a rate, not seconds saved: it combines with nothing


def _never(cand: Candidate, ctx: Context) -> Candidate:
    raise RuntimeError("batch size is advice only; it is never applied")


SPEC = RemedySpec(
    "batch_size", "batch", "overhead", STAGE_MUTATE, "batch", _applies, _predict, _never,
    "# double the batch if memory and convergence allow (throughput, not latency)",
    advice_only=True, title="larger batch (advice only)",
    how="raise the batch size if memory and convergence allow",
)

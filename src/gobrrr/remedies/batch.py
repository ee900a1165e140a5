"""Batch size: advice only, never applied (a bigger batch changes the training
dynamics and the memory footprint, which only the user can judge).

Predicted throughput change from the diagnose batch-scaling experiment: k x the batch
in T(kB)/T(B) the time gives k / (T(kB)/T(B)) x the samples per second (the essay: an
overhead-bound step gets the extra samples almost free). The experiment times 2x, and 4x
where 2x took under 50 ms a call: the advice takes the larger of the two it measured.
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
    best = 2 / ratio
    base = ctx.batch.points[0].time_s if ctx.batch.points else None
    four = next((p for p in ctx.batch.points if p.factor == 4 and p.time_s), None)
    if base and four is not None:
        ratio4 = four.time_s / base
        basis += f"; 4x batch took {ratio4:.2f}x: {4 / ratio4:.2f}x samples per second"
        best = max(best, 4 / ratio4)
    if best < MIN_ADVICE_GAIN:
        return Gain.none(basis + f", under the {MIN_ADVICE_GAIN:.1f}x worth advising")
    return Gain(best, basis)  # a rate, not seconds saved: it combines with nothing


def _never(cand: Candidate, ctx: Context) -> Candidate:
    raise RuntimeError("batch size is advice only; it is never applied")


SPEC = RemedySpec(
    "batch_size", "batch", "overhead", STAGE_MUTATE, "batch", _applies, _predict, _never,
    "# raise the batch (2x, 4x: the reason says what each measured) if memory and\n"
    "# convergence allow (throughput, not latency)",
    advice_only=True, title="larger batch (advice only)",
    how="raise the batch size if memory and convergence allow",
)

"""torch.inference_mode() for a workload that never calls backward.

With grad mode on, every op with an input that requires grad (a parameter, or anything
computed from one) also builds an autograd node: it saves its inputs for a backward that
never comes and bumps version counters. An inference workload that forgot
`torch.no_grad()` pays that per op (remedies/savings.py: AUTOGRAD_COST_PER_OP x the
measured per-op cost, at most the overhead). Under torch.compile it matters more: with no
autograd, AOTAutograd traces an inference graph (nothing saved for backward, more to fuse),
so the search keeps it under a compile even when it gains nothing alone (keep_when_neutral).

Applies when the counted call ran no backward and no optimizer step (Context.inference).
Outputs must match eager's at fp32 tolerance: the same math, without the bookkeeping.
"""

from __future__ import annotations

from typing import Any

from gobrrr.gains import Gain
from gobrrr.remedies import savings
from gobrrr.remedies.base import STAGE_PRECISION, Candidate, Context, RemedySpec

__all__ = ["SPEC", "inference_wrap"]


def inference_wrap(fn: Any) -> Any:
    """`fn` under torch.inference_mode(), or under torch.no_grad() where torch.compile
    traces it: AOTAutograd makes the same inference graph from either, and a real
    InferenceMode guard entered while a compile traces saves and restores the dispatch
    keys of the tracer (on an H200, torch 2.11, a compile of GPT-2 under it left
    "PythonDispatcherTLS was not set" behind, and every later torch op failed)."""
    import torch

    def inference_mode(*args: Any, **kwargs: Any) -> Any:
        off = torch.no_grad() if torch.compiler.is_compiling() else torch.inference_mode()
        with off:
            return fn(*args, **kwargs)

    return inference_mode


def _applies(ctx: Context) -> str | None:
    if not ctx.records:
        return "no counted ops to tell whether the workload calls backward"
    if not ctx.inference:
        return "the workload calls backward (or an optimizer step): it needs autograd"
    return None


def _predict(ctx: Context) -> Gain:
    return savings.gain_of(ctx, savings.autograd)


def _apply(cand: Candidate, ctx: Context) -> Candidate:
    cand.fn = inference_wrap(cand.fn)
    return cand


SPEC = RemedySpec(
    "inference_mode", "grad", "overhead", STAGE_PRECISION, "grad", _applies, _predict,
    _apply,
    "# the call runs no backward: no autograd bookkeeping\n"
    "with torch.inference_mode():  # or torch.no_grad()\n    out = model(x)",
    title="torch.inference_mode (no backward)",
    how="run the call under torch.inference_mode() (or torch.no_grad())",
    keep_when_neutral=True,
)

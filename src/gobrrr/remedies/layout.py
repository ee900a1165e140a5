"""channels_last for convolution nets.

cuDNN's fastest convolutions read NHWC; on NCHW tensors it wraps its GEMM in layout
transposes (the budget classifies those kernels apart: memory-bound time inside the
conv ops, aux kernels). Predicted: that transpose time disappears. Applied to the copy:
its modules and its 4-D inputs converted with memory_format=torch.channels_last.
"""

from __future__ import annotations

from gobrrr.gains import Gain, gain_from_saved
from gobrrr.remedies.base import (
    STAGE_MUTATE,
    Candidate,
    Context,
    RemedySpec,
)
from gobrrr.units import fmt_s

__all__ = ["SPEC"]

_CONV_TYPES = {"Conv2d", "ConvTranspose2d"}


def _applies(ctx: Context) -> str | None:
    if not ctx.module_types & _CONV_TYPES:
        return "no Conv2d module in the workload"
    if not ctx.independent_copy:
        return "the workload's modules could not be copied apart from yours"
    return None


def _predict(ctx: Context) -> Gain:
    b = ctx.budget
    if b is None:
        return Gain.none("no diagnose budget")
    # memory-bound kernels inside otherwise compute-bound conv ops: the layout transposes
    aux_s = sum(r.memory_s for r in b.per_op
                if "convolution" in r.name and r.compute_s > 0)
    if aux_s <= 0:
        return Gain.none("no layout-transpose time found inside the conv ops")
    return gain_from_saved(b, {"memory": aux_s},
                           f"{fmt_s(aux_s)} of transpose kernels inside conv ops disappear")


def _apply(cand: Candidate, ctx: Context) -> Candidate:
    import torch

    for m in cand.modules:
        m.to(memory_format=torch.channels_last)

    def convert(x: object) -> object:
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            y = x.detach().contiguous(memory_format=torch.channels_last)
            return y.requires_grad_(x.requires_grad)
        return x

    cand.args = tuple(convert(a) for a in cand.args)
    cand.kwargs = {k: convert(v) for k, v in cand.kwargs.items()}
    cand.tensors = [*cand.tensors,
                    *[a for a in [*cand.args, *cand.kwargs.values()]
                      if isinstance(a, torch.Tensor)]]
    return cand


SPEC = RemedySpec(
    "channels_last", "layout", "memory", STAGE_MUTATE, "layout", _applies, _predict,
    _apply,
    "model = model.to(memory_format=torch.channels_last)\n"
    "x = x.contiguous(memory_format=torch.channels_last)",
    title="channels_last",
    how="model.to(memory_format=torch.channels_last) and 4-D inputs likewise",
)

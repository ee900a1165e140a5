"""channels_last for convolution nets.

cuDNN's fastest convolutions read NHWC; on NCHW tensors it wraps its GEMM in layout
transposes (the budget classifies those kernels apart: memory-bound time inside the
conv ops, aux kernels). Predicted: that transpose time disappears, the kernels named
as cuDNN's layout transposes where the profiler named them: the other memory-bound
kernels of a conv op (a 1x1 convolution's GEMM, the stem's) stay. On the H200 (ResNet-50
b256, fp32, 2026-12-03) 4.3 ms of the conv ops' 9.7 ms of memory-bound kernels were
transposes, and in bf16 channels_last 3.6 ms of conv memory time remained; crediting all
9.7 ms over-predicted the compiled stack (5.85x, measured 3.23x). Applied to the copy:
its modules and its 4-D inputs converted with memory_format=torch.channels_last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gobrrr.budget import KernelRow
from gobrrr.gains import Gain, gain_from_saved
from gobrrr.remedies.base import (
    STAGE_MUTATE,
    Candidate,
    Context,
    RemedySpec,
)
from gobrrr.units import fmt_s

__all__ = ["SPEC", "transpose_share", "TRANSPOSE_KERNELS"]

_CONV_TYPES = {"Conv2d", "ConvTranspose2d"}
# cuDNN's layout conversions around an NHWC kernel run on NCHW tensors
# (cudnn::engines_precompiled::nchwToNhwcKernel, nhwcToNchwKernel on the H200)
TRANSPOSE_KERNELS = re.compile(r"nchwToNhwc|nhwcToNchw", re.IGNORECASE)


def _applies(ctx: Context) -> str | None:
    if not ctx.module_types & _CONV_TYPES:
        return "no Conv2d module in the workload"
    if not ctx.independent_copy:
        return "the workload's modules could not be copied apart from yours"
    return None


def transpose_share(kernels: Sequence[KernelRow], conv_ops: set[int]) -> float | None:
    """Of the memory-bound kernel time inside the conv ops, the share cuDNN's layout
    transposes take (TRANSPOSE_KERNELS, by name); None without kernels (CPU, traces
    without device activity)."""
    aux = [k for k in kernels if k.op_index in conv_ops and k.regime == "memory"]
    total_s = sum(k.duration_s for k in aux)
    if total_s <= 0:
        return None
    return sum(k.duration_s for k in aux if TRANSPOSE_KERNELS.search(k.name)) / total_s


def _predict(ctx: Context) -> Gain:
    b = ctx.budget
    if b is None:
        return Gain.none("no diagnose budget")
    # memory-bound kernels inside otherwise compute-bound conv ops
    aux_s = sum(r.memory_s for r in b.per_op
                if "convolution" in r.name and r.compute_s > 0)
    if aux_s <= 0:
        return Gain.none("no layout-transpose time found inside the conv ops")
    conv_ops = {c.index for c in b.per_call if c.op_class == "conv"}
    share = transpose_share(b.kernels, conv_ops)
    if share is None:
        return gain_from_saved(b, {"memory": aux_s}, f"{fmt_s(aux_s)} of memory-bound "
                               "kernels inside conv ops (layout transposes) disappear")
    if share <= 0:
        return Gain.none(f"none of the {fmt_s(aux_s)} of memory-bound kernels inside "
                         "the conv ops is a layout transpose")
    return gain_from_saved(b, {"memory": aux_s * share}, (
        f"{fmt_s(aux_s * share)} of layout-transpose kernels inside conv ops disappear "
        f"(the other {fmt_s(aux_s * (1 - share))} of memory-bound conv kernels stay)"))


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

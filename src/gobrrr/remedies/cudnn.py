"""cuDNN's benchmark mode for convolution nets with fixed input shapes.

By default cuDNN picks a convolution algorithm by heuristics; with
`torch.backends.cudnn.benchmark = True` the first call with each input shape times the
candidates and keeps the fastest. Predicted (remedies/savings.py): part of the
compute-bound convolution time above its roofline floor. The cost is that first call per
shape, so it pays only when shapes repeat (a fixed image size and batch); a workload that
changes shapes every call re-benchmarks every call. A global switch: set only while the
candidate runs, through gobrrr.settings.
"""

from __future__ import annotations

from gobrrr.gains import Gain
from gobrrr.remedies import savings
from gobrrr.remedies.base import STAGE_PRECISION, Candidate, Context, RemedySpec
from gobrrr.settings import cudnn_benchmark, read_flag

__all__ = ["SPEC"]


def _applies(ctx: Context) -> str | None:
    if ctx.device != "cuda":
        return "cuDNN is CUDA's convolution library"
    if not any(r.op_class == "conv" for r in ctx.records):
        return "no convolution in the counted ops"
    import torch

    if read_flag(torch.backends.cudnn, "benchmark"):
        return "torch.backends.cudnn.benchmark is already on"
    return None


def _predict(ctx: Context) -> Gain:
    return savings.gain_of(ctx, lambda c: savings.matmul_gap(c, ("conv",), "convolution"))


def _apply(cand: Candidate, ctx: Context) -> Candidate:
    cand.switches.append(cudnn_benchmark)
    return cand


SPEC = RemedySpec(
    "cudnn_benchmark", "cudnn", "compute", STAGE_PRECISION, "cudnn", _applies, _predict,
    _apply,
    "# input shapes fixed from call to call (each new shape is benchmarked once)\n"
    "torch.backends.cudnn.benchmark = True",
    title="cuDNN benchmark (fixed shapes)",
    how="torch.backends.cudnn.benchmark = True when input shapes do not change",
)

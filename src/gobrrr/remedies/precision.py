"""Lower-precision math on tensor cores: TF32 for fp32 matmuls/convs, bf16 autocast.

Predicted (report.remedies_for): the fp32 matmul time runs at the measured tf32 or bf16
peak instead (docs/reference.md, on an H200: fp32 51, tf32 360, bf16 ~700 TFLOP/s), the rest of
the budget unchanged. Outputs change by design, so they are verified under the
lower-precision tolerance of verify.py (relative L2, cosine reported).

TF32 is a global switch: it is set only while the candidate runs (around each timed
block), through gobrrr.settings, which restores the user's settings by the API they used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gobrrr.remedies.base import (
    STAGE_PRECISION,
    Candidate,
    Context,
    RemedySpec,
)
from gobrrr.settings import tf32, tf32_enabled

__all__ = ["SPECS", "autocast_wrap"]

_MATMUL_CLASSES = ("matmul", "conv", "attention")


def autocast_wrap(fn: Callable[..., Any], device: str) -> Callable[..., Any]:
    import torch

    def bf16_autocast(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            return fn(*args, **kwargs)

    return bf16_autocast


def _fp32_matmuls(ctx: Context) -> int:
    return sum(1 for r in ctx.records
               if r.op_class in _MATMUL_CLASSES and r.dtype == "fp32")


def _applies_tf32(ctx: Context) -> str | None:
    if ctx.device != "cuda":
        return "TF32 is a CUDA tensor-core format"
    if not _fp32_matmuls(ctx):
        return "no fp32 matmul or convolution to run in TF32"
    if tf32_enabled("matmul"):
        return "TF32 is already enabled"
    return None


def _applies_bf16(ctx: Context) -> str | None:
    if not _fp32_matmuls(ctx):
        return "no fp32 matmul or convolution for autocast to lower"
    return None


def _predict(prefix: str) -> Callable[[Context], tuple[float | None, str]]:
    def predict(ctx: Context) -> tuple[float | None, str]:
        got = ctx.report_prediction(prefix)
        return got if got else (None, "no compute-bound fp32 matmul time in the budget")

    return predict


def _apply_tf32(cand: Candidate, ctx: Context) -> Candidate:
    cand.switches.append(tf32)
    cand.precision = "bf16" if cand.precision == "bf16" else "tf32"
    return cand


def _apply_bf16(cand: Candidate, ctx: Context) -> Candidate:
    cand.fn = autocast_wrap(cand.fn, ctx.device)
    cand.precision = "bf16"
    return cand


SPECS = [
    RemedySpec("tf32", "precision", "compute", STAGE_PRECISION, "precision",
               _applies_tf32, _predict("TF32"), _apply_tf32,
               'torch.set_float32_matmul_precision("high")\n'
               "torch.backends.cudnn.allow_tf32 = True", precision="tf32"),
    RemedySpec("bf16_autocast", "precision", "compute", STAGE_PRECISION, "precision",
               _applies_bf16, _predict("bf16"), _apply_bf16,
               "with torch.autocast(device_type, dtype=torch.bfloat16):\n"
               "    out = step(*args)", precision="bf16"),
]

"""Lower-precision math on tensor cores: TF32 for fp32 matmuls/convs, bf16 autocast.

Predicted (report.remedies_for): the fp32 matmul time runs at the measured tf32 or bf16
peak instead (MEASURED.md on the H200: fp32 51, tf32 360, bf16 ~700 TFLOP/s), the rest of
the budget unchanged. Outputs change by design, so they are verified under the
lower-precision tolerance of verify.py (relative L2, cosine reported).

TF32 is a global switch: it is set only while the candidate runs (around each timed
block) and the previous matmul precision and cuDNN flag are restored in a finally.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from gobrrr.remedies.base import (
    STAGE_PRECISION,
    Candidate,
    Context,
    RemedySpec,
)

__all__ = ["SPECS", "tf32_on", "autocast_wrap", "read_flag"]

_MATMUL_CLASSES = ("matmul", "conv", "attention")


def read_flag(obj: Any, attr: str) -> Any:
    """A torch.backends flag, or None: torch >= 2.9 refuses to read some legacy flags
    once the new per-backend fp32_precision API was used."""
    try:
        return getattr(obj, attr)
    except (AttributeError, RuntimeError):
        return None


@contextlib.contextmanager
def tf32_on() -> Iterator[None]:
    import torch

    b = torch.backends
    prev = {(o, a): read_flag(o, a) for o, a in ((b.cuda.matmul, "allow_tf32"),
                                                 (b.cudnn, "allow_tf32"))}
    try:
        precision: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:
        precision = None
    try:
        torch.set_float32_matmul_precision("high")
    except RuntimeError:
        b.cuda.matmul.allow_tf32 = True
    b.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        # precision first: it also sets allow_tf32, which the next lines restore exactly
        if precision is not None:
            try:
                torch.set_float32_matmul_precision(precision)
            except RuntimeError:
                pass
        for (obj, attr), value in prev.items():
            if value is not None:
                setattr(obj, attr, value)


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
    import torch

    if ctx.device != "cuda":
        return "TF32 is a CUDA tensor-core format"
    if not _fp32_matmuls(ctx):
        return "no fp32 matmul or convolution to run in TF32"
    if read_flag(torch.backends.cuda.matmul, "allow_tf32"):
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
    cand.switches.append(tf32_on)
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

"""The workload's own fp32 GEMM shapes timed in fp32, TF32 and bf16 (CUDA): what the
precision remedies' predictions read instead of the ratio of peaks.

The calibrated peaks come from large square GEMMs, where every format runs near its
peak. A model's GEMMs are smaller and thinner: BERT-base at 32 x 128 tokens multiplies
4096 x 768 by 768 x 768, a few hundred tiles on 132 SMs with a short K, where fp32's
plain FMA units still run near their peak and bf16's tensor cores far from theirs. On the
H200 (2026-12-02, budget-60 rows) the peak ratio (about 14x) predicted BERT-base's bf16
cast at 11.7x with CUDA graphs beside it and 4.0x was measured; GPT-2 at 8 x 512 tokens
8.3x and 4.2x. Timing each shape in each format takes milliseconds per shape and puts the
shapes' own ratios into the prediction.

A GEMM's shape is read back from its record: the output's (batch,) M x N and its FLOPs,
2 x batch x M x N x K (mm, addmm, bmm, baddbmm; other matmul ops keep the peak ratio).

A shape whose M, N or K is not a multiple of the format's alignment (8 elements in bf16,
4 in TF32: 16 bytes) is also timed padded up to it, the padding torch.compile's Inductor
applies to such GEMMs (its pad_mm pass): in eager they run on slow unaligned kernels. On
the H200 GPT-2's LM head (4096 x 768 by 768 x 50257) took 3.35 ms in bf16 as the model
calls it and 0.45 ms with N padded to 50264, 0.49 ms compiled (`benchmarks/results/h200/
session-2026-12-04m/probe/`); this probe's layout read 2.49 and 0.48 ms. The precision
remedies credit the padded time only when the stack compiles (precision.py). The padded
time leaves out Inductor's copy into the padded buffer (folded into a constant under
freezing) and the slice of the output: approximate, slightly optimistic.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["GemmShape", "GemmTimes", "shape_of", "shapes_by_flops", "probe_gemms",
           "padded", "MAX_SHAPES", "REPS", "GEMM_OPS", "ALIGN"]

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
MAX_SHAPES = 16  # the shapes with the most FLOPs; the rest keep the peak ratio
REPS = 20  # timed calls per shape and format, after WARM
WARM = 3
# The GPU kept busy before each timed GEMM: enough for the host to record the start
# event and launch the GEMM behind it (tens of microseconds), short against the probe.
HOLD_S = 5e-4
# Inductor's pad_mm alignment, in elements: 16 bytes (torch/_inductor/fx_passes/pad_mm.py)
ALIGN = {"bf16": 8, "tf32": 4}


@dataclass(frozen=True)
class GemmShape:
    batch: int
    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


def padded(shape: GemmShape, fmt: str) -> GemmShape:
    """The shape with M, N and K rounded up to the format's alignment (ALIGN)."""
    a = ALIGN[fmt]

    def up(x: int) -> int:
        return -(-x // a) * a

    return GemmShape(shape.batch, up(shape.m), up(shape.n), up(shape.k))


@dataclass(frozen=True)
class GemmTimes:
    """One shape's median time per call in each format, in seconds; `*_padded_s`: the
    shape padded to the format's alignment (None: already aligned)."""

    shape: GemmShape
    fp32_s: float
    tf32_s: float
    bf16_s: float
    tf32_padded_s: float | None = None
    bf16_padded_s: float | None = None

    def ratio(self, fmt: str, compiled: bool = False) -> float:
        """The format's time over fp32's at this shape (< 1: faster); `compiled`: as
        Inductor runs it, padded where that is faster (pad_mm benchmarks both)."""
        own = self.tf32_s if fmt == "tf32" else self.bf16_s
        pad = self.tf32_padded_s if fmt == "tf32" else self.bf16_padded_s
        if compiled and pad is not None:
            own = min(own, pad)
        return own / self.fp32_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self.shape) | {"fp32_s": self.fp32_s, "tf32_s": self.tf32_s,
                                     "bf16_s": self.bf16_s}


def shape_of(op: str, out_shape: Sequence[int], flops: int) -> GemmShape | None:
    """The GEMM shape of a recorded call (module docstring); None when it is not one of
    GEMM_OPS or its FLOPs do not give a whole K."""
    if op not in GEMM_OPS or flops <= 0:
        return None
    dims = tuple(out_shape)
    if len(dims) == 2:
        batch, (m, n) = 1, dims
    elif len(dims) == 3:
        batch, m, n = dims
    else:
        return None
    per_k = 2 * batch * m * n
    if per_k <= 0 or flops % per_k:
        return None
    return GemmShape(batch, m, n, flops // per_k)


def shapes_by_flops(records: Iterable[Any], limit: int = MAX_SHAPES) -> list[GemmShape]:
    """The fp32 GEMM shapes of the records, most total FLOPs first, at most `limit`."""
    total: dict[GemmShape, int] = {}
    for r in records:
        if r.dtype != "fp32":
            continue
        s = shape_of(r.op, r.out_shape, r.flops)
        if s is not None:
            total[s] = total.get(s, 0) + r.flops
    return sorted(total, key=lambda s: -total[s])[:limit]


def probe_gemms(shapes: Sequence[GemmShape],
                timer: Callable[[GemmShape, str], float] | None = None) -> list[GemmTimes]:
    """Each shape timed in fp32 (TF32 off), TF32 and bf16, and padded where it is not
    aligned (module docstring); `timer(shape, fmt)` returns seconds per call (default:
    CUDA events, `_cuda_time`)."""
    time_it = timer or _cuda_time

    def pad_time(s: GemmShape, fmt: str) -> float | None:
        p = padded(s, fmt)
        return None if p == s else time_it(p, fmt)

    return [GemmTimes(s, time_it(s, "fp32"), time_it(s, "tf32"), time_it(s, "bf16"),
                      pad_time(s, "tf32"), pad_time(s, "bf16"))
            for s in shapes]


def _cuda_time(shape: GemmShape, fmt: str) -> float:
    """Median seconds of one GEMM of `shape` in `fmt` on the current CUDA device, TF32
    set only around it (gobrrr.settings restores the user's flag). Each timed GEMM is
    queued behind a sleep kernel (HOLD_S), so that its start event fires when the GPU
    reaches it, not when the host records it on an idle GPU: timed that way, ViT-B/16's
    32x1000x768 GEMM (12.4 us in the workload) read 40-65 us on the H200, the host's
    launch included, and every format's ratio went towards 1 (MLP 16k: TF32 2.97x where
    the workload measured 3.85x)."""
    import torch

    from gobrrr.host_issue import cuda_hold
    from gobrrr.settings import tf32

    dtype = torch.bfloat16 if fmt == "bf16" else torch.float32
    a = torch.randn(shape.batch, shape.m, shape.k, device="cuda", dtype=dtype)
    b = torch.randn(shape.batch, shape.k, shape.n, device="cuda", dtype=dtype)
    mult = torch.bmm if shape.batch > 1 else (lambda x, y: torch.mm(x[0], y[0]))
    hold = cuda_hold()
    times = []
    with tf32(fmt == "tf32"):
        for _ in range(WARM):
            mult(a, b)
        for _ in range(REPS):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            if hold is not None:
                hold(HOLD_S)
            start.record()
            mult(a, b)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)

"""Experiment 6, `opclasses`: share of FLOPs vs share of time by op class, for a
BERT-base-like encoder layer (essay claim 2, docs/reference.md; after Ivanov et al. 2020).

The layer is plain torch with random weights: hidden 768, 12 heads, FFN 3072, GELU,
post-LayerNorm, and *hand-written* attention (QK^T, softmax, PV as separate ops, not
SDPA), so the softmax is visible as its own op as in the essay's breakdown. Forward only,
no dropout (inference), so the element-wise share lacks dropout and the backward pass.

Classes: tensor contractions = counting's matmul + attention + conv; normalization =
norm + softmax (the essay's "statistical normalizations" include softmax); element-wise =
pointwise; everything else (copies of the transposed heads, views) is "other".
FLOPs come from gobrrr.counting. Time per class: on CUDA, kernel time from a profiled run
mapped to the aten op that launched each kernel; on CPU, each aten op's self CPU time in
a profiled run, which the profiler inflates: good for *shares* only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from gobrrr.counting import count
from gobrrr.lab.common import EssayRef, LabContext, LabResult
from gobrrr.lab.trace import profile_op_times_us
from gobrrr.units import fmt_flops

__all__ = ["ClassShare", "OpClassesResult", "CLASS_OF", "conclude", "run", "plot",
           "EncoderLayer", "shares"]

CLASS_OF = {"matmul": "matmul", "attention": "matmul", "conv": "matmul",
            "norm": "normalization", "softmax": "normalization", "pointwise": "element-wise"}
CLASSES = ("matmul", "normalization", "element-wise", "other")
ESSAY_SHARES = {"matmul": (99.80, 61.0), "normalization": (0.17, 25.5),
                "element-wise": (0.03, 13.5)}  # (% FLOPs, % runtime), BERT, Ivanov et al.

ESSAY = [
    EssayRef("tensor contractions", "99.80% of FLOPs / 61.0% of runtime"),
    EssayRef("normalization", "0.17% / 25.5%"),
    EssayRef("element-wise", "0.03% / 13.5%"),
    EssayRef("FLOP/s vs matmul", "normalization ~250x, element-wise ~700x lower"),
]


def _encoder_layer_cls() -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class _EncoderLayer(nn.Module):
        def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden)
            self.ff1 = nn.Linear(hidden, ffn)
            self.ff2 = nn.Linear(ffn, hidden)
            self.ln2 = nn.LayerNorm(hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, h = x.shape
            d = h // self.heads

            def split(t: torch.Tensor) -> torch.Tensor:
                return t.view(b, s, self.heads, d).transpose(1, 2)

            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            ctx = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, h)
            x = self.ln1(x + self.out(ctx))
            return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))

    return _EncoderLayer


def EncoderLayer(hidden: int = 768, heads: int = 12, ffn: int = 3072) -> Any:  # noqa: N802
    """A BERT-base-like post-LN encoder layer (torch imported on first use)."""
    return _encoder_layer_cls()(hidden, heads, ffn)


@dataclass
class ClassShare:
    op_class: str
    flops: int
    time_us: float  # per call
    flops_pct: float
    time_pct: float
    flops_per_s: float


@dataclass(kw_only=True)
class OpClassesResult(LabResult):
    batch: int
    seq: int
    dtype: str
    time_source: str
    layer_time_s: float = 0.0  # whole layer, honest timer
    profiled_op_time_s: float = 0.0  # sum of per-op times per call in the profiled run
    classes: list[ClassShare] = field(default_factory=list)
    op_class_of: dict[str, str] = field(default_factory=dict)

    def table(self) -> tuple[list[str], list[list[str]]]:

        rows = []
        for c in self.classes:
            ess = ESSAY_SHARES.get(c.op_class)
            rows.append([c.op_class, f"{c.flops_pct:.2f}%", f"{c.time_pct:.1f}%",
                         fmt_flops(c.flops_per_s) if c.flops else "-",
                         f"{ess[0]:.2f}% / {ess[1]:.1f}%" if ess else "-"])
        return ["class", "% FLOPs", "% time", "achieved", "essay (FLOPs / time)"], rows


def shares(flops: dict[str, int], time_us: dict[str, float]) -> list[ClassShare]:
    """Per class (CLASSES order) shares of FLOPs and time, and achieved FLOP/s."""
    tf, tt = sum(flops.values()) or 1, sum(time_us.values()) or 1.0
    out = []
    for c in CLASSES:
        f, t = flops.get(c, 0), time_us.get(c, 0.0)
        out.append(ClassShare(c, f, t, 100 * f / tf, 100 * t / tt, f / (t * 1e-6) if t else 0.0))
    return out


def conclude(r: OpClassesResult) -> tuple[str, bool | None]:
    by = {c.op_class: c for c in r.classes}
    mm, nm, ew = by["matmul"], by["normalization"], by["element-wise"]
    ratio = [f"{mm.flops_per_s / c.flops_per_s:.0f}x" if c.flops_per_s else "-"
             for c in (nm, ew)]
    non_mm_flops = nm.flops_pct + ew.flops_pct
    non_mm_time = nm.time_pct + ew.time_pct
    agrees = non_mm_time >= 10 * non_mm_flops  # few FLOPs, much time
    return (f"matmul {mm.flops_pct:.2f}% of FLOPs / {mm.time_pct:.1f}% of time, "
            f"normalization {nm.flops_pct:.2f}% / {nm.time_pct:.1f}%, element-wise "
            f"{ew.flops_pct:.2f}% / {ew.time_pct:.1f}% (essay 99.80/61.0, 0.17/25.5, "
            f"0.03/13.5); normalization and element-wise run {ratio[0]} and {ratio[1]} "
            f"below matmul FLOP/s (essay ~250x, ~700x)", agrees)


def run(ctx: LabContext) -> OpClassesResult:
    import torch


    t_start = time.perf_counter()
    if ctx.is_cuda:
        batch, seq, dtype = (8 if ctx.quick else 32), 512, torch.bfloat16
    else:
        batch, seq, dtype = (1, 128, torch.float32) if ctx.quick else (2, 512, torch.float32)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # module init draws from the global CPU RNG, restored on exit
        layer = EncoderLayer().to(ctx.device, dtype).eval()
    x = ctx.randn(batch, seq, 768, dtype=dtype)
    r = OpClassesResult(
        name="opclasses", title="Op classes: BERT-base-like encoder layer",
        device=ctx.device, conclusion="", agrees_with_essay=None, essay=list(ESSAY),
        batch=batch, seq=seq, dtype=str(dtype).replace("torch.", ""),
        time_source=("CUDA kernel time (torch.profiler), per launching aten op" if ctx.is_cuda
                     else "CPU self time per aten op (torch.profiler): shares only"))
    reps = 3
    with torch.no_grad():
        ctx.progress("opclasses: count")
        counted = count(layer, x)
        ctx.progress("opclasses: time the layer")
        r.layer_time_s = ctx.time(lambda: layer(x)).median_s
        ctx.progress("opclasses: profiled run")
        per_op_us = profile_op_times_us(lambda: layer(x), cuda=ctx.is_cuda, repeats=reps)
    flops: dict[str, int] = {}
    for rec in counted.records:
        cls = CLASS_OF.get(rec.op_class, "other")
        r.op_class_of.setdefault(rec.op, cls)
        flops[cls] = flops.get(cls, 0) + rec.flops
    time_us: dict[str, float] = {}
    for op, t in per_op_us.items():
        # Only aten ops: kernel rows (CUDA) and runtime calls would count twice.
        if not op.startswith("aten::"):
            continue
        cls = r.op_class_of.get(op, "other")
        time_us[cls] = time_us.get(cls, 0.0) + t / reps
    r.profiled_op_time_s = sum(time_us.values()) * 1e-6
    r.classes = shares(flops, time_us)
    r.conclusion, r.agrees_with_essay = conclude(r)
    r.notes.append("hand-written attention (QK^T, softmax, PV), post-LN, GELU, no dropout; "
                   "normalization = LayerNorm + softmax; forward only")
    r.elapsed_s = time.perf_counter() - t_start
    return r


def plot(r: OpClassesResult, axes: Any) -> None:
    ax1, ax2 = axes
    names = [c.op_class for c in r.classes]
    xs = range(len(names))
    ax1.bar([i - 0.2 for i in xs], [c.flops_pct for c in r.classes], 0.4, label="% FLOPs")
    ax1.bar([i + 0.2 for i in xs], [c.time_pct for c in r.classes], 0.4, label="% time")
    ax1.set_xticks(list(xs), names)
    ax1.set(ylabel="% of layer", title=f"opclasses: measured ({r.dtype}, {r.device})")
    ax1.legend(fontsize=7)
    ess = list(ESSAY_SHARES.items())
    xe = range(len(ess))
    ax2.bar([i - 0.2 for i in xe], [v[0] for _, v in ess], 0.4, label="% FLOPs")
    ax2.bar([i + 0.2 for i in xe], [v[1] for _, v in ess], 0.4, label="% time")
    ax2.set_xticks(list(xe), [k for k, _ in ess])
    ax2.set(ylabel="% of BERT", title="opclasses: essay (A100, Ivanov et al.)")
    ax2.legend(fontsize=7)

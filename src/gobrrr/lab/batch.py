"""Experiment 4, `batch`: an MLP's forward time across batch sizes.

The essay's test for overhead: double the batch; if the time barely grows, the GPU was
waiting on something else. Its caveat: for [B,D] x [D,D] with B << D the FLOPs double but
the bytes (dominated by the weights) do not, so a flat curve can also mean a memory-bound
op of low intensity. We tell them apart by counting FLOPs and bytes at each size and
comparing the measured time with FLOPs/peak, bytes/bandwidth and ops x per-op cost.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gobrrr.counting import count
from gobrrr.lab.common import EssayRef, LabContext, LabResult, geometric
from gobrrr.phases import working_ops
from gobrrr.units import fmt_s

__all__ = ["BatchPoint", "BatchResult", "plateau_end", "conclude", "run", "plot", "build_mlp"]

PLATEAU = 0.25  # within 25% of the smallest batch's time counts as flat
HIDDEN = 512
LAYERS = 4

ESSAY = [
    EssayRef("batch-size test", "double the batch, runtime +~10%: suggests overhead-bound"),
    EssayRef("caveat", "[B,D]x[D,D] with B << D: FLOPs double, bytes barely change: "
             "low intensity, not overhead; count both to tell"),
]


@dataclass
class BatchPoint:
    batch: int
    time_s: float
    flops: int
    bytes: int
    n_ops: int  # aten ops that do work (views excluded): each is a launch on a GPU
    compute_s: float  # flops / fp32 matmul peak
    memory_s: float  # bytes / copy bandwidth
    overhead_s: float  # n_ops x eager per-op cost

    @property
    def bound(self) -> str:
        parts = {"compute": self.compute_s, "memory": self.memory_s,
                 "overhead": self.overhead_s}
        return max(parts, key=lambda k: parts[k])


@dataclass(kw_only=True)
class BatchResult(LabResult):
    hidden: int = HIDDEN
    layers: int = LAYERS
    points: list[BatchPoint] = field(default_factory=list)
    plateau_end_batch: int = 0

    def table(self) -> tuple[list[str], list[list[str]]]:

        rows = [[str(p.batch), fmt_s(p.time_s), f"{p.flops / 1e6:.4g} M",
                 f"{p.bytes / 2**20:.3g} MiB", fmt_s(p.compute_s), fmt_s(p.memory_s),
                 fmt_s(p.overhead_s), p.bound] for p in self.points]
        return ["batch", "time", "FLOPs", "bytes", "FLOPs/peak", "bytes/bw",
                "ops x per-op", "largest"], rows


def plateau_end(batches: Sequence[int], times_s: Sequence[float]) -> int:
    """The largest batch up to which every time stays within PLATEAU of the first one."""
    end = batches[0]
    for b, t in zip(batches, times_s, strict=True):
        if t > (1 + PLATEAU) * times_s[0]:
            break
        end = b
    return end


def conclude(r: BatchResult) -> tuple[str, bool | None]:

    first = r.points[0]
    end = next(p for p in r.points if p.batch == r.plateau_end_batch)
    if end is first:
        return (f"no plateau: time grows {r.points[1].time_s / first.time_s:.2f}x from "
                f"batch {first.batch} to {r.points[1].batch}", False)
    cause = first.bound
    caveat = (" (the essay's B << D caveat: low intensity, not overhead)" if cause == "memory"
              else "")
    return (f"flat (within {PLATEAU:.0%}) from batch {first.batch} to {end.batch} "
            f"({fmt_s(first.time_s)} -> {fmt_s(end.time_s)}) while FLOPs grew "
            f"{end.flops / first.flops:.0f}x and bytes {end.bytes / first.bytes:.2f}x; at "
            f"batch {first.batch}: ops x per-op {fmt_s(first.overhead_s)}, bytes/bw "
            f"{fmt_s(first.memory_s)}, FLOPs/peak {fmt_s(first.compute_s)}: "
            f"{cause}-bound{caveat}", True)


def build_mlp(device: str, hidden: int = HIDDEN, layers: int = LAYERS) -> Any:
    """The reference MLP (docs/reference.md): layers x [Linear(hidden, hidden), GELU],
    fp32, random weights."""
    import torch
    from torch import nn

    # NB: module init draws from the global CPU RNG; callers wrap this in fork_rng.
    torch.manual_seed(0)
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(hidden, hidden), nn.GELU()]
    return nn.Sequential(*mods).to(device).eval()


def run(ctx: LabContext) -> BatchResult:
    import torch


    t_start = time.perf_counter()
    hi = (4096 if ctx.quick else 16384) if ctx.is_cuda else (1024 if ctx.quick else 4096)
    batches = geometric(1, hi, 4)
    with torch.random.fork_rng(devices=[]):
        mlp = build_mlp(ctx.device)
    c = ctx.ceilings
    r = BatchResult(name="batch", title=f"Batch size: MLP {LAYERS} x [Linear({HIDDEN}), GELU]",
                    device=ctx.device, conclusion="", agrees_with_essay=None,
                    essay=list(ESSAY))
    with torch.no_grad():
        for b in batches:
            ctx.progress(f"batch: {b}")
            x = ctx.randn(b, HIDDEN, seed=b)
            counted = count(mlp, x)
            n_ops = working_ops(counted.records)
            t = ctx.time(partial(mlp, x)).median_s
            r.points.append(BatchPoint(
                batch=b, time_s=t, flops=counted.total_flops, bytes=counted.total_bytes,
                n_ops=n_ops, compute_s=counted.total_flops / c.peak_flops_per_s["fp32"],
                memory_s=counted.total_bytes / c.bandwidth_bytes_per_s,
                overhead_s=n_ops * c.op_overhead_s))
    r.plateau_end_batch = plateau_end([p.batch for p in r.points], [p.time_s for p in r.points])
    r.conclusion, r.agrees_with_essay = conclude(r)
    r.notes.append("forward only, no_grad, fp32 (on CUDA the fp32 peak assumes TF32 off, "
                   "torch's default for matmuls)")
    r.elapsed_s = time.perf_counter() - t_start
    return r


def plot(r: BatchResult, axes: Any) -> None:
    ax1, ax2 = axes
    bs = [p.batch for p in r.points]
    ax1.plot(bs, [p.time_s * 1e6 for p in r.points], "o-", label="measured")
    ax1.plot(bs, [p.overhead_s * 1e6 for p in r.points], ":", label="ops x per-op cost")
    ax1.plot(bs, [p.memory_s * 1e6 for p in r.points], "--", label="bytes / bandwidth")
    ax1.plot(bs, [p.compute_s * 1e6 for p in r.points], "-.", label="FLOPs / peak")
    ax1.axvline(r.plateau_end_batch, color="grey", lw=1)
    ax1.set(xscale="log", yscale="log", xlabel="batch", ylabel="forward time (us)",
            title="batch: time vs the three predictions")
    ax1.legend(fontsize=7)
    ax2.plot(bs, [p.flops / r.points[0].flops for p in r.points], "o-", label="FLOPs")
    ax2.plot(bs, [p.bytes / r.points[0].bytes for p in r.points], "s-", label="bytes")
    ax2.plot(bs, [p.time_s / r.points[0].time_s for p in r.points], "^-", label="time")
    ax2.set(xscale="log", yscale="log", xlabel="batch", ylabel="x batch 1",
            title="batch: growth (the B << D caveat)")
    ax2.legend(fontsize=7)

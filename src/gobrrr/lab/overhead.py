"""Experiment 5, `overhead`: what the time outside kernels costs (essay claim 7, docs/reference.md).

Python's scalar op rate against the device's FLOP rate; the eager cost of one tiny op;
an eager loop of small ops against its CUDA-graph replay (same kernels, no Python or
dispatch per op); and from a profiler trace, the share of time the GPU sits idle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gobrrr.experiments import capture_cuda_graph
from gobrrr.lab.common import EssayRef, LabContext, LabResult
from gobrrr.lab.trace import idle_fraction, kernel_intervals_us
from gobrrr.units import fmt_flops, fmt_s

__all__ = ["OverheadResult", "conclude", "run", "plot"]

LOOP_OPS = 64  # ops per loop call: enough to amortize the sync around each sample
SMALL = 2**10  # elements: kernels of ~2 us, far below the per-op cost
LARGE = 2**24  # elements: kernels of ~30 us on an H200, longer than the per-op cost
IDLE_AGREES = 0.5  # the essay saw ~85% idle; more than half idle reproduces its point

ESSAY = [
    EssayRef("Python scalar additions", "~32 M/s"),
    EssayRef("device FLOPs per Python FLOP", "9.75 M (312 TFLOP/s bf16 / 32 M/s)"),
    EssayRef("eager ops/s on tiny tensors", "~280 k (~3.6 us/op)"),
    EssayRef("GPU idle, eager loop of small cos", "~85% (launches every ~14 us, ~2 us "
             "kernels); large tensors: back to back"),
]


@dataclass(kw_only=True)
class OverheadResult(LabResult):
    python_ops_per_s: float
    device_flops_per_s: float  # the fastest calibrated matmul rate (the essay used 312 T)
    device_dtype: str
    flops_per_python_op: float
    op_overhead_s: float  # eager tiny op, from calibration
    loop_small_per_op_s: float = 0.0  # eager loop of cos on SMALL elements, per op
    graph_small_per_op_s: float | None = None  # its CUDA-graph replay, per op
    graph_speedup: float | None = None
    idle_small: float | None = None
    idle_large: float | None = None
    kernel_small_us: float | None = None  # mean kernel duration in the small-tensor trace

    def table(self) -> tuple[list[str], list[list[str]]]:

        def opt(x: float | None, f: Any) -> str:
            return "-" if x is None else f(x)

        return ["quantity", "this machine"], [
            ["Python float additions", f"{self.python_ops_per_s / 1e6:.3g} M/s"],
            [f"matmul peak ({self.device_dtype})", fmt_flops(self.device_flops_per_s)],
            ["device FLOPs per Python FLOP", f"{self.flops_per_python_op / 1e6:.3g} M"],
            ["eager tiny op", f"{fmt_s(self.op_overhead_s)} "
             f"({1 / self.op_overhead_s / 1e3:.0f} k ops/s)"],
            [f"eager loop, cos on {SMALL} el., per op", fmt_s(self.loop_small_per_op_s)],
            ["same loop, CUDA graph replay, per op", opt(self.graph_small_per_op_s, fmt_s)],
            ["GPU idle, small tensors", opt(self.idle_small, lambda v: f"{v:.0%}")],
            [f"GPU idle, {LARGE} el.", opt(self.idle_large, lambda v: f"{v:.0%}")],
            ["mean kernel, small tensors", opt(self.kernel_small_us, lambda v: f"{v:.3g} us")],
        ]


def conclude(r: OverheadResult) -> tuple[str, bool | None]:

    head = (f"the {r.device_dtype} matmul peak does {r.flops_per_python_op / 1e6:.3g} M "
            f"FLOPs per Python add (essay 9.75 M); eager tiny op {fmt_s(r.op_overhead_s)} "
            f"(essay 3.6 us)")
    if r.graph_speedup is None or r.idle_small is None:
        return head + "; CUDA graphs and GPU idle need CUDA", None
    agrees = r.idle_small >= IDLE_AGREES and r.graph_speedup > 1.0
    large = f", {r.idle_large:.0%} with large ones" if r.idle_large is not None else ""
    return (f"{head}; CUDA-graph replay {r.graph_speedup:.1f}x faster than the eager loop; "
            f"GPU idle {r.idle_small:.0%} with small tensors (essay ~85%){large}", agrees)


def run(ctx: LabContext) -> OverheadResult:
    import torch

    t_start = time.perf_counter()
    c = ctx.ceilings
    dtype = max(c.peak_flops_per_s, key=lambda d: c.peak_flops_per_s[d])
    r = OverheadResult(
        name="overhead", title="Overhead: Python, eager dispatch, CUDA graphs, GPU idle",
        device=ctx.device, conclusion="", agrees_with_essay=None, essay=list(ESSAY),
        python_ops_per_s=c.python_ops_per_s, device_flops_per_s=c.peak_flops_per_s[dtype],
        device_dtype=dtype, flops_per_python_op=c.peak_flops_per_s[dtype] / c.python_ops_per_s,
        op_overhead_s=c.op_overhead_s)
    small = ctx.randn(SMALL)

    def loop(x: torch.Tensor = small) -> torch.Tensor:
        for _ in range(LOOP_OPS):
            x = x.cos()
        return x

    with torch.no_grad():
        ctx.progress("overhead: eager loop of small ops")
        r.loop_small_per_op_s = ctx.time(loop).median_s / LOOP_OPS
        if ctx.is_cuda:
            _cuda_parts(ctx, r, loop)
    r.conclusion, r.agrees_with_essay = conclude(r)
    r.elapsed_s = time.perf_counter() - t_start
    return r


def _cuda_parts(ctx: LabContext, r: OverheadResult, loop: Any) -> None:


    ctx.progress("overhead: CUDA graph capture + replay")
    try:
        graph, _ = capture_cuda_graph(loop)
        r.graph_small_per_op_s = ctx.time(graph.replay).median_s / LOOP_OPS
        r.graph_speedup = r.loop_small_per_op_s / r.graph_small_per_op_s
    except RuntimeError as exc:
        r.notes.append(f"CUDA graph capture failed: {str(exc).splitlines()[0][:160]}")
    ctx.progress("overhead: profiler trace (idle fraction)")
    ivs = kernel_intervals_us(loop, repeats=3)
    if ivs:
        r.idle_small = idle_fraction(ivs)
        r.kernel_small_us = sum(e - s for s, e in ivs) / len(ivs)
    big = ctx.randn(LARGE)
    ivs_large = kernel_intervals_us(lambda: loop(big), repeats=1)
    if ivs_large:
        r.idle_large = idle_fraction(ivs_large)
    r.notes.append("idle = 1 - (union of kernel time) / (first kernel start to last kernel "
                   "end), from a separate profiled run; times are from unprofiled runs")


def plot(r: OverheadResult, axes: Any) -> None:
    ax1, ax2 = axes
    labels = ["tiny op\n(calibrate)", "loop op\neager"]
    vals = [r.op_overhead_s * 1e6, r.loop_small_per_op_s * 1e6]
    if r.graph_small_per_op_s is not None:
        labels.append("loop op\nCUDA graph")
        vals.append(r.graph_small_per_op_s * 1e6)
    ax1.bar(labels, vals, color=["C0", "C3", "C2"][: len(vals)])
    ax1.set(ylabel="us per op", title="overhead: per-op cost")
    if r.idle_small is not None:
        names = ["small", "large"] if r.idle_large is not None else ["small"]
        idle = [r.idle_small] + ([r.idle_large] if r.idle_large is not None else [])
        ax2.bar(names, [100 * v for v in idle], color="C1")
        ax2.set(ylabel="GPU idle (%)", ylim=(0, 100), title="overhead: GPU idle in the trace")
    else:
        ax2.text(0.5, 0.5, f"{r.flops_per_python_op / 1e6:.3g} M device FLOPs\n"
                 "per Python FLOP\n(no GPU trace on CPU)", ha="center", va="center")
        ax2.set_axis_off()

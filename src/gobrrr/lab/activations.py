"""Experiment 3, `activations`: ReLU, GELU, cos and a heavier pointwise op on one large
tensor. Each reads and writes every element once; when that traffic, not the math, sets
the time, they all cost the same (essay claim 4, docs/reference.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gobrrr.counting import count
from gobrrr.lab.common import EssayRef, LabContext, LabResult
from gobrrr.units import fmt_bytes_per_s, fmt_s

__all__ = ["OpTime", "ActivationsResult", "conclude", "run", "plot", "SAME_COST_PCT"]

SAME_COST_PCT = 5.0  # "same cost": within 5% of ReLU (H200: GELU 0%, docs/reference.md)

ESSAY = [
    EssayRef("GELU vs ReLU", "same cost: bytes, not math, set the time of a pointwise op"),
    EssayRef("cos", "same cost as ReLU/GELU"),
    EssayRef("ops per element before math dominates", "~50-100 (A100: 400 G fp32 loads/s "
             "vs ~20 T ops/s)"),
]


def _ops() -> dict[str, Callable[[Any], Any]]:
    import torch
    import torch.nn.functional as F

    # lgamma: a series with logs per element, the heaviest common unary op in eager
    # torch; it shows where math starts to cost more than memory.
    return {"relu": F.relu, "gelu": F.gelu, "cos": torch.cos, "lgamma": torch.lgamma}


@dataclass
class OpTime:
    op: str
    time_s: float
    bytes: int  # counted: one read + one write of N fp32
    bytes_per_s: float
    vs_relu_pct: float


@dataclass(kw_only=True)
class ActivationsResult(LabResult):
    n_elements: int
    copy_bytes_per_s: float
    ops: list[OpTime] = field(default_factory=list)
    ops_per_element_break_even: float = 0.0  # vector FLOP/s / elements loaded per s

    def table(self) -> tuple[list[str], list[list[str]]]:

        return ["op", "time", "bandwidth", "% of copy bw", "vs ReLU"], [
            [o.op, fmt_s(o.time_s), fmt_bytes_per_s(o.bytes_per_s),
             f"{100 * o.bytes_per_s / self.copy_bytes_per_s:.0f}%", f"{o.vs_relu_pct:+.1f}%"]
            for o in self.ops]


def conclude(r: ActivationsResult) -> tuple[str, bool | None]:
    by = {o.op: o for o in r.ops}
    relu, gelu = by["relu"], by["gelu"]
    same = [o.op for o in r.ops if abs(o.vs_relu_pct) <= SAME_COST_PCT]
    heavier = [f"{o.op} {o.vs_relu_pct:+.0f}%" for o in r.ops
               if o.vs_relu_pct > SAME_COST_PCT]
    agrees = abs(gelu.vs_relu_pct) <= SAME_COST_PCT
    tail = (f"; costlier (math-bound here): {', '.join(heavier)}" if heavier
            else "; no op was costlier")
    return (f"GELU is {gelu.vs_relu_pct:+.1f}% vs ReLU (ReLU at "
            f"{100 * relu.bytes_per_s / r.copy_bytes_per_s:.0f}% of copy bandwidth); "
            f"same cost within {SAME_COST_PCT:.0f}%: {', '.join(same)}{tail}; "
            f"break-even ~{r.ops_per_element_break_even:.0f} FLOPs/element", agrees)


def run(ctx: LabContext) -> ActivationsResult:
    import torch


    t_start = time.perf_counter()
    n = ctx.pointwise_elements()
    x = ctx.randn(n).abs_().add_(0.5)  # positive: lgamma is cheap and finite there
    bw = ctx.ceilings.bandwidth_bytes_per_s
    r = ActivationsResult(
        name="activations", title="Activations: ReLU vs GELU vs cos vs lgamma",
        device=ctx.device, conclusion="", agrees_with_essay=None, essay=list(ESSAY),
        n_elements=n, copy_bytes_per_s=bw,
        # fp32 elements moved per second (4 bytes read, 4 written) vs non-FMA FLOP/s
        # (half the FMA-counted fp32 peak): ops per element before math costs more.
        ops_per_element_break_even=(ctx.ceilings.vector_flops_per_s() / 2) / (bw / 8),
    )
    with torch.no_grad():
        times: dict[str, tuple[float, int]] = {}
        for name, op in _ops().items():
            ctx.progress(f"activations: {name}")
            nbytes = count(op, x).total_bytes
            times[name] = (ctx.time(partial(op, x)).median_s, nbytes)
    relu_s = times["relu"][0]
    for name, (t, nbytes) in times.items():
        r.ops.append(OpTime(name, t, nbytes, nbytes / t, 100 * (t - relu_s) / relu_s))
    r.conclusion, r.agrees_with_essay = conclude(r)
    r.elapsed_s = time.perf_counter() - t_start
    return r


def plot(r: ActivationsResult, axes: Any) -> None:
    ax1, ax2 = axes
    names = [o.op for o in r.ops]
    ax1.bar(names, [o.time_s * 1e3 for o in r.ops])
    ax1.set(ylabel="time per call (ms)", title=f"activations: N={r.n_elements:,} fp32")
    ax2.bar(names, [100 * o.bytes_per_s / r.copy_bytes_per_s for o in r.ops], color="C1")
    ax2.axhline(100, color="k", ls=":", lw=1)
    ax2.set(ylabel="% of copy bandwidth", title="activations: bandwidth")

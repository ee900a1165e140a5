"""Experiment 2, `fusion`: `x.cos().cos()` eager (two kernels) vs compiled (one).

Eager reads x, writes a temporary, reads it back and writes the result: 4 accesses per
element. Fused: 2 (essay claim 3, docs/reference.md). When both run at the memory roof
the fused version is 2x faster and costs about one `x.cos()`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gobrrr.counting import count
from gobrrr.lab.common import EssayRef, LabContext, LabResult
from gobrrr.lab.compiled import compile_fresh, graphs_so_far
from gobrrr.units import fmt_bytes_per_s, fmt_s

__all__ = ["FusionResult", "conclude", "run", "plot"]

AGREE_FRACTION = 0.8  # "agrees": within 0.8x..1.25x of the predicted speedup
BANDWIDTH_BOUND = 0.6  # eager cos at >= 60% of copy bandwidth counts as bandwidth-bound

ESSAY = [
    EssayRef("global memory accesses per element", "unfused 4 (2 reads, 2 writes); fused 2"),
    EssayRef("fused x.cos().cos()", "costs about the same as one x.cos()"),
    EssayRef("predicted speedup", "2x (half the bytes)"),
]


@dataclass(kw_only=True)
class FusionResult(LabResult):
    n_elements: int
    eager_s: float = 0.0  # x.cos().cos(), two kernels
    fused_s: float | None = None  # torch.compile'd, one kernel
    one_cos_s: float = 0.0  # x.cos(), the yardstick for "costs one cos"
    eager_bytes: int = 0  # counted by gobrrr.counting
    fused_bytes: int = 0  # minimum traffic of the fused kernel = that of one cos
    predicted_speedup: float = 0.0
    speedup: float | None = None
    fused_vs_one_cos: float | None = None
    eager_bytes_per_s: float = 0.0
    copy_bytes_per_s: float = 0.0
    compile_status: str = ""

    def table(self) -> tuple[list[str], list[list[str]]]:

        def row(what: str, t: float | None, nbytes: int) -> list[str]:
            if t is None:
                return [what, "-", f"{nbytes / 2**20:.0f} MiB", "-"]
            return [what, fmt_s(t), f"{nbytes / 2**20:.0f} MiB", fmt_bytes_per_s(nbytes / t)]

        return ["variant", "time", "bytes moved", "bandwidth"], [
            row("x.cos() (one op)", self.one_cos_s, self.fused_bytes),
            row("x.cos().cos() eager", self.eager_s, self.eager_bytes),
            row(f"x.cos().cos() fused ({self.compile_status})", self.fused_s, self.fused_bytes),
        ]


def conclude(r: FusionResult) -> tuple[str, bool | None]:
    if r.speedup is None or r.fused_vs_one_cos is None:
        return f"fused variant did not run compiled ({r.compile_status})", None
    frac_bw = r.eager_bytes_per_s / r.copy_bytes_per_s if r.copy_bytes_per_s else 0.0
    lo, hi = AGREE_FRACTION * r.predicted_speedup, r.predicted_speedup / AGREE_FRACTION
    agrees = lo <= r.speedup <= hi
    verdict = "agrees with" if agrees else ("below" if r.speedup < lo else "above")
    why = ""
    if not agrees and frac_bw < BANDWIDTH_BOUND:
        why = (f"; eager runs at only {frac_bw:.0%} of copy bandwidth: cos is math-bound "
               "here, so bytes do not set the time"
               + (" and the compiled kernel's math is faster" if r.speedup > hi else ""))
    return (f"fused is {r.speedup:.2f}x faster than eager (bytes "
            f"{r.eager_bytes / r.fused_bytes:.0f}:1 predict {r.predicted_speedup:.2f}x) and "
            f"costs {r.fused_vs_one_cos:.2f}x one x.cos(): {verdict} the essay's "
            f"{r.predicted_speedup:.0f}x{why}", agrees)


def run(ctx: LabContext) -> FusionResult:
    import torch


    t_start = time.perf_counter()
    n = ctx.pointwise_elements()
    x = ctx.randn(n)

    def cos_cos(t: torch.Tensor) -> torch.Tensor:
        return t.cos().cos()

    r = FusionResult(name="fusion", title="Fusion: x.cos().cos() eager vs compiled",
                     device=ctx.device, conclusion="", agrees_with_essay=None,
                     essay=list(ESSAY), n_elements=n,
                     copy_bytes_per_s=ctx.ceilings.bandwidth_bytes_per_s)
    with torch.no_grad():
        r.eager_bytes = count(cos_cos, x).total_bytes  # 2 ops x (read N + write N) x 4 B
        r.fused_bytes = count(torch.cos, x).total_bytes  # one read of x, one write
        r.predicted_speedup = r.eager_bytes / r.fused_bytes
        ctx.progress("fusion: eager")
        r.one_cos_s = ctx.time(lambda: x.cos()).median_s
        r.eager_s = ctx.time(lambda: cos_cos(x)).median_s
        r.eager_bytes_per_s = r.eager_bytes / r.eager_s
        ctx.progress("fusion: compile + time")
        fused, check = compile_fresh(cos_cos, (x,), expected_ops=2)
        if check.compiled:
            before = graphs_so_far()
            t = ctx.time(lambda: fused(x)).median_s
            check.recompiled_while_timing = graphs_so_far() != before
            if not check.recompiled_while_timing:
                r.fused_s = t
                r.speedup = r.eager_s / t
                r.fused_vs_one_cos = t / r.one_cos_s
        r.compile_status = check.status()
    r.conclusion, r.agrees_with_essay = conclude(r)
    r.elapsed_s = time.perf_counter() - t_start
    return r


def plot(r: FusionResult, axes: Any) -> None:
    ax1, ax2 = axes
    names = ["cos", "cos.cos\neager", "cos.cos\nfused"]
    times = [r.one_cos_s, r.eager_s, r.fused_s or 0.0]
    ax1.bar(names, [t * 1e3 for t in times], color=["C0", "C3", "C2"])
    ax1.set(ylabel="time per call (ms)", title="fusion: runtime")
    ax2.bar(names, [b / 2**20 for b in (r.fused_bytes, r.eager_bytes, r.fused_bytes)],
            color=["C0", "C3", "C2"])
    ax2.set(ylabel="bytes moved (MiB, counted)", title="fusion: bytes")

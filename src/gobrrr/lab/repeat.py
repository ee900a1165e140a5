"""Experiment 1, `repeat`: `x = x * c` k times, fused into one kernel by torch.compile.

Each call reads x once and writes the result once (8 bytes per fp32 element) whatever k
is, and does k FLOPs per element: intensity k/8 FLOP/byte. Below the ridge point the
runtime is the memory time and stays flat; above it, it grows with k (essay claim 6,
docs/reference.md).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gobrrr.lab.common import EssayRef, LabContext, LabResult, geometric
from gobrrr.lab.compiled import compile_fresh, graphs_so_far
from gobrrr.units import fmt_bytes_per_s, fmt_flops, fmt_s

if TYPE_CHECKING:
    import torch

    from gobrrr.timing import Timing

__all__ = ["Knee", "RepeatPoint", "RepeatResult", "find_knee", "make_chain", "run", "plot"]

# Not 2.0 as in the essay: 256 doublings overflow fp32 to inf, and we time real numbers.
CHAIN_FACTOR = 1.0001
BYTES_PER_ELEMENT = 8  # fp32: one 4-byte read + one 4-byte write, whatever k is
DEPARTURE = 0.25  # "left the flat region": more than 25% above the flat time
MIN_RISE = 1.5  # the largest k must be 1.5x the flat time for a compute line to be fitted

ESSAY = [
    EssayRef("N", "~2^24 fp32"),
    EssayRef("flat runtime", "~102 us for repeat 1..32"),
    EssayRef("achieved FLOP/s", "~0.2 TFLOP/s at repeat 1, doubling; 64: ~8.1, 128: ~9.0, "
             "256: ~9.4 (peak 9.75 non-FMA)"),
    EssayRef("achieved bandwidth", "~1.3 TB/s (near peak 1.5) until repeat 32, then falls"),
    EssayRef("knee", "memory-bound below ~32, compute-bound above ~64"),
]


def make_chain(k: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The essay's loop. NB: every k shares this inner code object, which is what hits
    dynamo's recompile limit when compiled in a loop (see lab/compiled.py)."""

    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(k):
            x = x * CHAIN_FACTOR
        return x

    return chain


@dataclass(frozen=True)
class Knee:
    flat_time_s: float  # median time of the points with k <= 4 (all deeply memory-bound)
    slope_s_per_k: float | None  # time per multiply at the largest k (compute line)
    k_fit: float | None  # where the flat line meets the compute line through the origin
    k_departure: int | None  # first k more than DEPARTURE above the flat time


def find_knee(ks: Sequence[int], times_s: Sequence[float]) -> Knee:
    """Roofline fit of t(k) = max(t_flat, k * s): t_flat from the small k, s from the
    largest k (deep in the compute-bound region the time is k * s), knee = t_flat / s.
    No compute line when the largest k is still under MIN_RISE x flat: the knee lies
    beyond the measured range."""
    if len(ks) != len(times_s) or not ks:
        raise ValueError("ks and times_s must be non-empty and of equal length")
    pairs = list(zip(ks, times_s, strict=True))
    flat = statistics.median([t for k, t in pairs if k <= 4] or [times_s[0]])
    departure = next((k for k, t in pairs if t > (1 + DEPARTURE) * flat), None)
    k_max, t_max = ks[-1], times_s[-1]
    if t_max < MIN_RISE * flat:
        return Knee(flat, None, None, departure)
    slope = t_max / k_max
    return Knee(flat, slope, flat / slope, departure)


@dataclass
class RepeatPoint:
    k: int
    time_s: float | None  # None: not timed because it did not run compiled
    flops_per_s: float | None
    bytes_per_s: float | None
    compile_status: str
    compiled: bool
    compile_s: float


@dataclass(kw_only=True)
class RepeatResult(LabResult):
    n_elements: int
    dtype: str = "fp32"
    points: list[RepeatPoint] = field(default_factory=list)
    eager_one_mul_s: float = 0.0  # one eager `x * c`, the fallback detector's yardstick
    knee: Knee | None = None
    ridge_flops_per_byte: float = 0.0  # fp32 matmul peak (FMA = 2) / copy bandwidth
    k_ridge_fma: float = 0.0  # 8 bytes/element * ridge
    k_ridge_mul: float = 0.0  # half: a multiply is 1 FLOP per instruction, an FMA 2
    best_flops_per_s: float = 0.0
    fell_back: list[int] = field(default_factory=list)

    def table(self) -> tuple[list[str], list[list[str]]]:

        bw = max((p.bytes_per_s or 0.0 for p in self.points), default=0.0) or 1.0
        rows = []
        for p in self.points:
            if p.time_s is None:
                rows.append([str(p.k), "-", "-", "-", "-", p.compile_status])
                continue
            rows.append([str(p.k), fmt_s(p.time_s), fmt_flops(p.flops_per_s or 0),
                         fmt_bytes_per_s(p.bytes_per_s or 0),
                         f"{100 * (p.bytes_per_s or 0) / bw:.0f}%", p.compile_status])
        return ["k", "time", "achieved FLOP/s", "bandwidth", "% of best", "compiled"], rows


def conclude(r: RepeatResult) -> tuple[str, bool | None]:

    kn = r.knee
    pred = (f"ridge {r.ridge_flops_per_byte:.1f} FLOP/byte predicts k~{r.k_ridge_mul:.0f} "
            f"for multiplies (k~{r.k_ridge_fma:.0f} at the FMA peak)")
    fb = f"; k={','.join(map(str, r.fell_back))} did not run compiled (not timed)" \
        if r.fell_back else ""
    if kn is None:
        return f"no compiled point could be timed{fb}", None
    if kn.k_fit is None:
        k_max = max((p.k for p in r.points if p.time_s is not None), default=0)
        return (f"runtime stays within {100 * (MIN_RISE - 1):.0f}% of {fmt_s(kn.flat_time_s)} "
                f"up to k={k_max}: still memory-bound, knee beyond the range; {pred}{fb}",
                None)
    ratio = kn.k_fit / r.k_ridge_mul
    agrees = 0.5 <= ratio <= 2.0
    dep = f"first k >{DEPARTURE:.0%} above flat: {kn.k_departure}" if kn.k_departure else ""
    return (f"flat at {fmt_s(kn.flat_time_s)} then linear; knee k~{kn.k_fit:.0f} "
            f"(flat line meets compute line; {dep}); {pred}: "
            f"{'agrees' if agrees else 'disagrees'} ({ratio:.2f}x); "
            f"best {fmt_flops(r.best_flops_per_s)}{fb}", agrees)


def run(ctx: LabContext) -> RepeatResult:
    import torch

    t_start = time.perf_counter()
    n = ctx.pointwise_elements()
    # On CPU few variants with --quick: each compile costs ~1 s on a 2-core machine.
    ks = geometric(1, 64) if (ctx.quick and not ctx.is_cuda) else geometric(1, 256)
    x = ctx.randn(n)
    eager = ctx.time(lambda: x * CHAIN_FACTOR)
    ridge = ctx.ceilings.ridge_flops_per_byte("fp32")
    result = RepeatResult(
        name="repeat", title="Repeat: x = x * c, k times, one fused kernel", device=ctx.device,
        conclusion="", agrees_with_essay=None, essay=list(ESSAY), n_elements=n,
        eager_one_mul_s=eager.median_s, ridge_flops_per_byte=ridge,
        k_ridge_fma=BYTES_PER_ELEMENT * ridge, k_ridge_mul=BYTES_PER_ELEMENT * ridge / 2,
    )
    with torch.no_grad():
        for k in ks:
            ctx.progress(f"repeat: k={k} (compile + time)")
            fn, check = compile_and_check(make_chain(k), x, k)
            point = RepeatPoint(k, None, None, None, check.status(), check.compiled,
                                check.compile_s)
            if check.compiled:
                timing = _time_checked(ctx, fn, x, check)
                # An eager chain costs ~k single multiplies; a compiled one is far below
                # that once k >= 16 on any device whose ridge is above 1 FLOP/byte. Minimum
                # times and half of k eager multiplies: a scheduler stall cannot fake it.
                slow = k >= 16 and timing.min_s > 0.5 * k * eager.min_s
                if slow and not check.recompiled_while_timing:
                    # Other work on the machine since eager was timed slows the compiled
                    # kernel alone (a 2-core CI machine: 120 ms at k=32): both again, side
                    # by side, before calling it a fall back
                    eager_now = ctx.time(lambda: x * CHAIN_FACTOR)
                    again = _time_checked(ctx, fn, x, check)
                    timing = min(timing, again, key=lambda tm: tm.min_s)
                    slow = timing.min_s > 0.5 * k * max(eager.min_s, eager_now.min_s)
                t = timing.median_s
                if check.recompiled_while_timing or slow:
                    point.compiled = False
                    point.compile_status = (check.status() if check.recompiled_while_timing
                                            else f"as slow as eager ({t * 1e3:.3g} ms)")
                else:
                    point.time_s = t
                    point.flops_per_s = n * k / t
                    point.bytes_per_s = BYTES_PER_ELEMENT * n / t
            if not point.compiled:
                result.fell_back.append(k)
            result.points.append(point)
    timed = [p for p in result.points if p.time_s is not None]
    if timed:
        result.knee = find_knee([p.k for p in timed], [p.time_s or 0.0 for p in timed])
        result.best_flops_per_s = max(p.flops_per_s or 0.0 for p in timed)
    result.conclusion, result.agrees_with_essay = conclude(result)
    result.notes.append("c = 1.0001 instead of the essay's 2 (256 doublings overflow fp32); "
                        "torch.compile(fullgraph=True) from a reset dynamo state per k")
    result.elapsed_s = time.perf_counter() - t_start
    return result


def compile_and_check(fn: Callable[..., Any], x: torch.Tensor, k: int) -> tuple[Any, Any]:

    return compile_fresh(fn, (x,), expected_ops=k)


def _time_checked(ctx: LabContext, fn: Callable[..., Any], x: torch.Tensor,
                  check: Any) -> Timing:

    before = graphs_so_far()
    t = ctx.time(lambda: fn(x))
    check.recompiled_while_timing = graphs_so_far() != before
    return t


def plot(r: RepeatResult, axes: Any) -> None:
    pts = [p for p in r.points if p.time_s is not None]
    ks = [p.k for p in pts]
    ax1, ax2 = axes
    ax1.plot(ks, [(p.time_s or 0) * 1e3 for p in pts], "o-", label="measured")
    if r.knee and r.knee.k_fit:
        ax1.axvline(r.knee.k_fit, color="C1", ls="--", label=f"knee k~{r.knee.k_fit:.0f}")
    ax1.axvline(r.k_ridge_mul, color="C2", ls=":", label=f"ridge k~{r.k_ridge_mul:.0f}")
    ax1.set(xscale="log", yscale="log", xlabel="k (multiplies per element)",
            ylabel="time per call (ms)", title="repeat: runtime")
    ax1.legend(fontsize=7)
    ax2.plot(ks, [(p.flops_per_s or 0) / 1e12 for p in pts], "o-", label="TFLOP/s")
    ax2.set(xscale="log", yscale="log", xlabel="k", ylabel="achieved TFLOP/s",
            title="repeat: FLOP/s and bandwidth")
    tw = ax2.twinx()
    tw.plot(ks, [(p.bytes_per_s or 0) / 1e12 for p in pts], "s--", color="C3", label="TB/s")
    tw.set_ylabel("achieved TB/s (r+w)")
    ax2.legend(loc="upper left", fontsize=7)
    tw.legend(loc="lower left", fontsize=7)

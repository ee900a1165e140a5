"""The verdict and the remedies that follow from the budget.

Every number in a sentence here comes from a field of the report (a measurement, a
count or a ceiling), so the JSON holds what the prose says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gobrrr.budget import FUSABLE_CLASSES, Budget, fusable_bytes_saved
from gobrrr.counting import CountResult
from gobrrr.experiments import BatchScaling, GraphReplay
from gobrrr.hardware import Ceilings
from gobrrr.units import fmt_bytes_per_s, fmt_flops, fmt_num, fmt_pct, fmt_s

__all__ = ["Remedy", "Verdict", "HostTime", "host_time", "remedies_for", "verdict_for",
           "HOST_NOTE_FRACTION"]

# Host time outside PyTorch ops is named in the evidence from this share of T_wall up:
# below it, it is within the error of its own estimate (a tiny op's cost stands for every
# op's dispatch) plus the timer's spread (up to 5%).
HOST_NOTE_FRACTION = 0.10


@dataclass
class Remedy:
    name: str
    regime: str  # the regime it addresses
    predicted_speedup: float | None  # whole-workload, from the budget
    basis: str  # the first-principles arithmetic behind the prediction
    how: str  # what to do (applying it is `gobrrr optimize`)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class Verdict:
    regime: str
    share: float
    evidence: list[str]
    agreement: str

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class HostTime:
    """The budget's overhead split by what an overhead remedy can remove, per call."""

    n_ops: int  # dispatched aten ops of one call, views included (each is a dispatch)
    dispatch_s: float  # n_ops x the measured per-op cost, at most the overhead
    outside_s: float  # the rest: host time outside PyTorch ops (Python, sleep, loading)


def host_time(b: Budget, counts: CountResult, ceil: Ceilings) -> HostTime:
    """What torch.compile or CUDA graphs can remove is the dispatch (and launch) work of
    the ops that ran: n_ops x the measured cost of one tiny op is a fair upper estimate
    of it. Overhead beyond that (on CUDA, GPU-idle time beyond it) is host time that is
    not PyTorch dispatch, such as a sleep or data loading: no remedy here removes it."""
    n_ops = len(counts.records)
    dispatch_s = min(b.overhead_s, n_ops * ceil.op_overhead_s)
    return HostTime(n_ops, dispatch_s, b.overhead_s - dispatch_s)
def _roof_kind(ceil: Ceilings) -> str:
    """How the ceilings were had: "measured", or "datasheet" (a trace from a GPU this
    machine has not calibrated, gobrrr analyze)."""
    return "datasheet" if ceil.source == "datasheet" else "measured"


def verdict_for(b: Budget, counts: CountResult, ceil: Ceilings, device: str,
                batch: BatchScaling | None, graph: GraphReplay | None,
                findings: list[str] | None = None) -> Verdict:
    """The dominant regime, its evidence (every number from the report), whether the
    experiments agree with the budget; `findings` (recompiles, graph breaks) are added
    to the evidence as they are."""
    fr = b.fractions
    regime = b.regime
    ev: list[str] = []
    n_ops = len([r for r in counts.records if r.op_class != "view"])
    if device == "cuda":
        idle = max(0.0, 1 - b.busy_s / b.total_s) if b.total_s else 0.0
        ev.append(f"GPU idle {fmt_pct(idle)} of wall time ({fmt_s(b.wall_s)} per call, "
                  f"{fmt_s(b.busy_s)} of kernels from {n_ops} ops)")
    else:
        ev.append(f"ops execute {fmt_pct(b.busy_s / b.total_s if b.total_s else 0)} of "
                  f"wall time ({fmt_s(b.wall_s)} per call); the rest is Python and dispatch "
                  f"({n_ops} ops; one tiny op costs {fmt_s(ceil.op_overhead_s)} here)")
    host = host_time(b, counts, ceil)
    if b.total_s > 0 and host.outside_s >= HOST_NOTE_FRACTION * b.total_s:
        ev.append(f"{fmt_s(host.outside_s)} per call is host time outside PyTorch ops "
                  "(Python, sleep, data loading): no GPU or compiler remedy removes it")
    if regime == "memory" and b.memory_s > 0:
        mem_bytes = sum(r.bytes for r in b.per_op if r.memory_s > 0)
        ev.append(f"memory-bound ops moved {fmt_num(mem_bytes, 'B')} at "
                  f"{fmt_bytes_per_s(mem_bytes / b.memory_s)} = "
                  f"{fmt_pct(mem_bytes / b.memory_s / ceil.bandwidth_bytes_per_s)} of the "
                  f"{_roof_kind(ceil)} copy bandwidth")
    if regime == "compute" and b.compute_s > 0:
        flops = sum(r.flops for r in b.per_op if r.compute_s > 0)
        unit = max(b.compute_s_by_unit, key=lambda k: b.compute_s_by_unit[k])
        peak = ceil.peak_flops_per_s.get(unit, ceil.vector_flops_per_s())
        ev.append(f"compute-bound ops ran at {fmt_flops(flops / b.compute_s)} = "
                  f"{fmt_pct(flops / b.compute_s / peak)} of the {_roof_kind(ceil)} {unit} "
                  "peak")
    if batch is not None and batch.time_ratio is not None:
        ev.append(batch.reading)
    if graph is not None and graph.possible and graph.speedup:
        ev.append(f"CUDA-graph replay {graph.speedup:.2f}x faster than eager "
                  f"(budget predicted {graph.predicted_speedup:.2f}x)"
                  if graph.predicted_speedup else
                  f"CUDA-graph replay {graph.speedup:.2f}x faster than eager")
    elif graph is not None and not graph.possible and device == "cuda":
        ev.append(f"no CUDA-graph replay: {graph.reason}")
    ev += findings or []
    disagree = []
    if batch is not None and batch.agrees is False:
        disagree.append(f"batch scaling measured {batch.time_ratio:.2f}x where the budget "
                        f"predicted {batch.predicted_time_ratio:.2f}x")
    if graph is not None and graph.agrees is False:
        disagree.append(f"graph replay gained {graph.speedup:.2f}x where the budget "
                        f"predicted {graph.predicted_speedup:.2f}x")
    ran = [x for x in (batch and batch.agrees, graph and graph.agrees) if x is not None]
    if disagree:
        agreement = "experiments DISAGREE with the budget: " + "; ".join(disagree)
    elif ran:
        agreement = "experiments agree with the budget"
    else:
        agreement = "no experiment could check the budget"
    return Verdict(regime, fr[regime], ev, agreement)


def _speedup(total_s: float, saved_s: float) -> float | None:
    if total_s <= 0 or saved_s <= 0 or saved_s >= total_s:
        return None
    return total_s / (total_s - saved_s)


def remedies_for(b: Budget, counts: CountResult, ceil: Ceilings, device: str,
                 batch: BatchScaling | None, graph: GraphReplay | None) -> list[Remedy]:
    """The essay's remedies that fit this budget, each with a predicted whole-workload
    speedup; sorted by predicted gain."""
    out: list[Remedy] = []
    total = b.total_s
    # Overhead remedies save at most the dispatch of the ops that ran, never host time
    # outside them: a sleep in the step would otherwise predict a millionfold gain.
    host = host_time(b, counts, ceil)
    dispatch = (f"{host.n_ops} ops x {fmt_s(ceil.op_overhead_s)} = "
                f"{fmt_s(host.dispatch_s)} of dispatch")
    stays = (f"; {fmt_s(host.outside_s)} of host time outside PyTorch ops stays"
             if host.outside_s > 0 else "")
    if device == "cuda" and host.dispatch_s > 0:
        measured = f"; graph replay measured {graph.speedup:.2f}x" if (
            graph and graph.speedup) else ""
        out.append(Remedy(
            "CUDA graphs / torch.compile(mode='reduce-overhead')", "overhead",
            _speedup(total, host.dispatch_s),
            f"T_wall {fmt_s(total)} -> {fmt_s(total - host.dispatch_s)} (kernel time "
            f"{fmt_s(b.busy_s)}): the launch overhead goes, at most {dispatch}"
            f"{stays}{measured}",
            "capture the step with torch.cuda.graphs (optimizers with capturable=True) or "
            "torch.compile(mode='reduce-overhead')",
        ))
    if device == "cpu" and host.dispatch_s > 0:
        out.append(Remedy(
            "torch.compile (fewer dispatched ops)", "overhead",
            _speedup(total, host.dispatch_s),
            f"upper bound: {dispatch} removed, of {fmt_s(b.overhead_s)} of Python/dispatch "
            f"time{stays}",
            "torch.compile the model: fused kernels are dispatched once per group of ops",
        ))
    # Advice only when doubling the batch buys at least 10% more samples per second.
    if batch is not None and batch.time_ratio and 2 / batch.time_ratio >= 1.1:
        gain = 2 / batch.time_ratio
        out.append(Remedy(
            "larger batch (advice only)", "overhead", gain,
            f"2x batch took {batch.time_ratio:.2f}x time: {gain:.2f}x samples per second",
            "raise the batch size if memory and convergence allow",
        ))
    saved_bytes, fusable_bytes = fusable_bytes_saved(counts.records)
    fusable_mem_s = sum(r.memory_s for r in b.per_class if r.name in FUSABLE_CLASSES)
    if saved_bytes > 0 and fusable_mem_s > 0:
        saved_s = fusable_mem_s * saved_bytes / fusable_bytes
        out.append(Remedy(
            "operator fusion (torch.compile)", "memory", _speedup(total, saved_s),
            f"fusing pointwise/norm chains cuts their bytes {fmt_num(fusable_bytes, 'B')} -> "
            f"{fmt_num(fusable_bytes - saved_bytes, 'B')}: {fmt_s(saved_s)} of "
            f"{fmt_s(fusable_mem_s)} memory-bound time",
            "torch.compile(model): Inductor fuses pointwise and reduction chains",
        ))
    peaks = ceil.peak_flops_per_s
    fp32_s = b.compute_s_by_unit.get("fp32", 0.0)
    if device == "cuda" and fp32_s > 0 and "tf32" in peaks:
        saved = fp32_s * (1 - peaks["fp32"] / peaks["tf32"])
        out.append(Remedy(
            "TF32 matmuls", "compute", _speedup(total, saved),
            f"fp32 matmul time {fmt_s(fp32_s)} at {peaks['tf32'] / peaks['fp32']:.1f}x the "
            f"rate ({_roof_kind(ceil)} tf32 / fp32 peaks)",
            "torch.set_float32_matmul_precision('high')",
        ))
    slow_s = fp32_s + b.compute_s_by_unit.get("tf32", 0.0)
    if slow_s > 0 and "bf16" in peaks:
        from_peak = peaks["tf32"] if "tf32" in peaks and fp32_s == 0 else peaks["fp32"]
        if peaks["bf16"] > from_peak:
            saved = slow_s * (1 - from_peak / peaks["bf16"])
            out.append(Remedy(
                "bf16 autocast", "compute", _speedup(total, saved),
                f"fp32/tf32 matmul time {fmt_s(slow_s)} at the {_roof_kind(ceil)} bf16 rate "
                f"({peaks['bf16'] / from_peak:.1f}x); halves matmul bytes too",
                "with torch.autocast(device_type, dtype=torch.bfloat16): ...",
            ))
    out.sort(key=lambda r: -(r.predicted_speedup or 0))
    return out

"""The verdict, the remedies that follow from it, and the Report that carries everything.

Every number in a sentence here comes from a field of the report (a measurement, a
count or a ceiling), so the JSON holds what the prose says.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any

from gobrrr import __version__
from gobrrr.budget import FUSABLE_CLASSES, Budget, fusable_bytes_saved
from gobrrr.counting import CountResult
from gobrrr.experiments import BatchScaling, GraphReplay
from gobrrr.hardware import Ceilings
from gobrrr.timing import Timing

__all__ = ["Remedy", "Verdict", "Report", "SCHEMA_VERSION", "remedies_for", "verdict_for"]

SCHEMA_VERSION = "1.0"


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


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _us(x: float) -> str:
    return f"{x * 1e3:.3g} ms" if x >= 1e-3 else f"{x * 1e6:.3g} us"


def verdict_for(b: Budget, counts: CountResult, ceil: Ceilings, device: str,
                batch: BatchScaling | None, graph: GraphReplay | None) -> Verdict:
    fr = b.fractions
    regime = b.regime
    ev: list[str] = []
    n_ops = len([r for r in counts.records if r.op_class != "view"])
    if device == "cuda":
        idle = max(0.0, 1 - b.busy_s / b.total_s) if b.total_s else 0.0
        ev.append(f"GPU idle {_pct(idle)} of wall time ({_us(b.wall_s)} per call, "
                  f"{_us(b.busy_s)} of kernels from {n_ops} ops)")
    else:
        ev.append(f"ops execute {_pct(b.busy_s / b.total_s if b.total_s else 0)} of "
                  f"wall time ({_us(b.wall_s)} per call); the rest is Python and dispatch "
                  f"({n_ops} ops; one tiny op costs {_us(ceil.op_overhead_s)} here)")
    if regime == "memory" and b.memory_s > 0:
        mem_bytes = sum(r.bytes for r in b.per_op if r.memory_s > 0)
        ev.append(f"memory-bound ops moved {mem_bytes / 1e6:.3g} MB at "
                  f"{mem_bytes / b.memory_s / 1e9:.3g} GB/s = "
                  f"{_pct(mem_bytes / b.memory_s / ceil.bandwidth_bytes_per_s)} of the "
                  "measured copy bandwidth")
    if regime == "compute" and b.compute_s > 0:
        flops = sum(r.flops for r in b.per_op if r.compute_s > 0)
        unit = max(b.compute_s_by_unit, key=lambda k: b.compute_s_by_unit[k])
        peak = ceil.peak_flops_per_s.get(unit, ceil.vector_flops_per_s())
        ev.append(f"compute-bound ops ran at {flops / b.compute_s / 1e12:.3g} TFLOP/s = "
                  f"{_pct(flops / b.compute_s / peak)} of the measured {unit} peak")
    if batch is not None and batch.time_ratio is not None:
        ev.append(batch.reading)
    if graph is not None and graph.possible and graph.speedup:
        ev.append(f"CUDA-graph replay {graph.speedup:.2f}x faster than eager "
                  f"(budget predicted {graph.predicted_speedup:.2f}x)"
                  if graph.predicted_speedup else
                  f"CUDA-graph replay {graph.speedup:.2f}x faster than eager")
    elif graph is not None and not graph.possible and device == "cuda":
        ev.append(f"no CUDA-graph replay: {graph.reason}")
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
    overhead = b.overhead_s
    if device == "cuda" and overhead > 0:
        measured = f"; graph replay measured {graph.speedup:.2f}x" if (
            graph and graph.speedup) else ""
        out.append(Remedy(
            "CUDA graphs / torch.compile(mode='reduce-overhead')", "overhead",
            _speedup(total, overhead),
            f"T_wall {_us(total)} -> kernel time {_us(b.busy_s)}: the launch overhead "
            f"goes{measured}",
            "capture the step with torch.cuda.graphs (optimizers with capturable=True) or "
            "torch.compile(mode='reduce-overhead')",
        ))
    if device == "cpu" and overhead > 0:
        out.append(Remedy(
            "torch.compile (fewer dispatched ops)", "overhead", _speedup(total, overhead),
            f"upper bound: all {_us(overhead)} of Python/dispatch time removed",
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
            f"fusing pointwise/norm chains cuts their bytes {fusable_bytes / 1e6:.3g} MB -> "
            f"{(fusable_bytes - saved_bytes) / 1e6:.3g} MB: {_us(saved_s)} of "
            f"{_us(fusable_mem_s)} memory-bound time",
            "torch.compile(model): Inductor fuses pointwise and reduction chains",
        ))
    peaks = ceil.peak_flops_per_s
    fp32_s = b.compute_s_by_unit.get("fp32", 0.0)
    if device == "cuda" and fp32_s > 0 and "tf32" in peaks:
        saved = fp32_s * (1 - peaks["fp32"] / peaks["tf32"])
        out.append(Remedy(
            "TF32 matmuls", "compute", _speedup(total, saved),
            f"fp32 matmul time {_us(fp32_s)} at {peaks['tf32'] / peaks['fp32']:.1f}x the "
            "rate (measured tf32 / fp32 peaks)",
            "torch.set_float32_matmul_precision('high')",
        ))
    slow_s = fp32_s + b.compute_s_by_unit.get("tf32", 0.0)
    if slow_s > 0 and "bf16" in peaks:
        from_peak = peaks["tf32"] if "tf32" in peaks and fp32_s == 0 else peaks["fp32"]
        if peaks["bf16"] > from_peak:
            saved = slow_s * (1 - from_peak / peaks["bf16"])
            out.append(Remedy(
                "bf16 autocast", "compute", _speedup(total, saved),
                f"fp32/tf32 matmul time {_us(slow_s)} at the measured bf16 rate "
                f"({peaks['bf16'] / from_peak:.1f}x); halves matmul bytes too",
                "with torch.autocast(device_type, dtype=torch.bfloat16): ...",
            ))
    out.sort(key=lambda r: -(r.predicted_speedup or 0))
    return out


@dataclass
class Report:
    """Everything `gobrrr doctor` found; `.to_json()` is what `--json` prints."""

    workload: dict[str, Any]
    ceilings: Ceilings
    timing: Timing
    counts: CountResult
    budget: Budget
    verdict: Verdict
    remedies: list[Remedy]
    batch: BatchScaling | None = None
    graph: GraphReplay | None = None
    diagnose_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc)
                         .isoformat(timespec="seconds"))
    # The ProfiledRun behind the budget (kernels, raw profiler): for save_trace. Not in
    # to_dict(): runtime objects, not data.
    run: Any = field(default=None, repr=False, compare=False)

    @property
    def regime(self) -> str:
        return self.verdict.regime

    @property
    def fractions(self) -> dict[str, float]:
        return self.budget.fractions

    @property
    def breakdown(self) -> dict[str, Any]:
        b = self.budget
        return {"seconds": {"overhead": b.overhead_s, "memory": b.memory_s,
                            "compute": b.compute_s},
                "fractions": b.fractions,
                "per_op": [r.to_dict() for r in b.per_op],
                "per_module": [r.to_dict() for r in b.per_module]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "gobrrr.report",
            "schema_version": SCHEMA_VERSION,
            "gobrrr_version": __version__,
            "created": self.created,
            "workload": self.workload,
            "machine": self.ceilings.to_dict(),
            "regime": self.regime,
            "fractions": self.fractions,
            "verdict": self.verdict.to_dict(),
            "timing": self.timing.to_dict(),
            "counts": {"total_flops": self.counts.total_flops,
                       "total_bytes": self.counts.total_bytes,
                       "ops": len(self.counts.records),
                       "uncounted_ops": self.counts.uncounted_ops},
            "budget": self.budget.to_dict(),
            "experiments": {
                "batch_scaling": self.batch.to_dict() if self.batch else None,
                "graph_replay": self.graph.to_dict() if self.graph else None,
            },
            "remedies": [r.to_dict() for r in self.remedies],
            "diagnose_s": self.diagnose_s,
            "notes": self.notes,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    def save_html(self, path: str) -> None:
        """One self-contained HTML file: verdict, budget, roofline, experiments, tables,
        remedies, machine (gobrrr.html)."""
        from gobrrr.html import write_report

        write_report(self.to_dict(), path)

    def _repr_html_(self) -> str:
        """Jupyter: the same report inline (a fragment, styles scoped to it)."""
        from gobrrr.html import render_report

        return render_report(self.to_dict(), standalone=False)

    def save_trace(self, path: str) -> None:
        """A Chrome/Perfetto JSON trace of the profiled run, annotated per op and kernel
        (gobrrr.perfetto)."""
        from gobrrr.perfetto import write_trace

        write_trace(self, path)

"""A trace's health check: what the trace holds and lacks, and what each gap costs the
analysis, printed before the report and kept in it (`workload.trace.check`).
`gobrrr analyze --check` prints only this. Users ask for it (TraceLens#985): a trace
recorded without shapes, or one whose kernels are not linked to ops, still gives a
report, and the report's numbers are only as good as what the trace recorded.

Each row: `item`, `ok` (False: a gap that weakens the analysis) and `detail`, the
figures; the shares are of the averaged step's busy time (the GPU's kernel time, or on
a CPU trace the ops' recorded time)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gobrrr.recorded import COMPILED_GRAPH_RANGES, is_inductor_kernel
from gobrrr.tracefile.columns import TraceColumns
from gobrrr.tracefile.steps import TraceRun
from gobrrr.units import fmt_s

__all__ = ["CheckRow", "trace_check"]


@dataclass(frozen=True)
class CheckRow:
    item: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _share(part_s: float, whole_s: float) -> str:
    return f"{100 * part_s / whole_s:.0f}%" if whole_s > 0 else "?"


def _names(ops: Any, most: int = 3) -> str:
    """The distinct op names, the first `most` of them."""
    distinct = sorted(set(ops))
    return ", ".join(distinct[:most]) + (", ..." if len(distinct) > most else "")


def trace_check(cols: TraceColumns, tr: TraceRun,
                step_s: float | None = None) -> list[CheckRow]:
    """The check of a trace whose steps `tr` averaged (module docstring); `step_s`: the
    step time the user gave (--step-ms), T_wall in place of the traced span."""
    run = tr.run
    busy_s = sum(run.op_time_s.values()) + run.unattributed_s
    where = "device time" if tr.device == "cuda" else "op time"
    rows: list[CheckRow] = []
    dev = cols.device
    if cols.has_device_activity:
        devices = sorted(set(dev["device"].tolist()) - {-1})
        rows.append(CheckRow("device activity", True,
                             f"{len(dev['ts_us'])} kernels, copies and memsets in the "
                             f"trace, on {len(devices) or 1} device(s)"))
    elif len(cols.launch["ts_us"]):
        rows.append(CheckRow("device activity", False,
                             f"none, though {len(cols.launch['ts_us'])} CUDA runtime calls "
                             "were recorded: the profile lacked ProfilerActivity.CUDA, so "
                             "the GPU's time is unknown and the CPU side is analysed"))
    else:
        rows.append(CheckRow("device activity", True,
                             "none: a CPU trace, analysed on its CPU side (each op's time is "
                             "its recorded duration, the profiler's cost included)"))
    rule = cols.step_rule
    rows.append(CheckRow("steps", rule is not None and rule.kind == "profiler",
                         f"{tr.steps} step(s): {rule.summary if rule else '?'}"))
    records = {r.index: r for r in run.counts.records}
    n_ops = len(records)
    for item, indices, what in (
            ("shapes", tr.unshaped, "recorded without shapes: no FLOPs or bytes, their "
             "regime is a guess from their names"),
            ("ops rebuilt", tr.unbuilt, "could not be rebuilt from their shapes: bytes of "
             "their inputs at most, no FLOPs")):
        if not indices:
            rows.append(CheckRow(item, True, f"all {n_ops} op calls of the step"))
            continue
        t = sum(run.op_time_s.get(i, 0.0) for i in indices)
        rows.append(CheckRow(item, False, f"{len(indices)} of {n_ops} op calls "
                             f"({_share(t, busy_s)} of the step's {where}; "
                             f"{_names(records[i].op for i in indices)}) {what}"))
    no_formula = [i for i, r in records.items() if not r.has_formula and r.flops == 0
                  and i not in set(tr.unshaped) | set(tr.unbuilt) and r.op_class != "view"]
    if no_formula:
        t = sum(run.op_time_s.get(i, 0.0) for i in no_formula)
        rows.append(CheckRow("FLOP formulas", True,
                             f"{len(no_formula)} op calls ({_share(t, busy_s)} of the step's "
                             f"{where}) have no FLOP formula: counted by bytes"))
    if cols.has_device_activity:
        unlinked = tr.unlinked_kernels
        rows.append(CheckRow("kernel links", unlinked == 0, (
            "every kernel of the step linked to the op that launched it" if not unlinked
            else f"{unlinked:.0f} kernel(s) per step ({_share(run.unattributed_s, busy_s)} of "
                 "device time) not linked to an op (no External id or correlation): "
                 "GEMM, convolution and attention kernels by their names count as "
                 "compute, the rest as memory, with no roofline")))
    outside = []
    if tr.outside_ops:
        outside.append(f"{tr.outside_ops} op call(s)")
    if tr.outside_kernels:
        outside.append(f"{tr.outside_kernels} kernel(s) ({fmt_s(tr.outside_kernel_s)})")
    rows.append(CheckRow("outside the steps", True,
                         ("; ".join(outside) + " outside the steps: not counted")
                         if outside else "nothing"))
    graph_parts = []
    if cols.graph_launches:
        graph_parts.append(f"{cols.graph_launches} CUDA graph launch(es): their kernels "
                           "carry no op or shapes")
    kernels = [k for k in run.counts.records if is_inductor_kernel(k.op)]
    if kernels:
        graph_parts.append(f"{len(kernels)} Inductor kernel call(s) per step, counted by "
                           "their names and tensor arguments (FLOPs for template GEMMs "
                           "only)")
    elif any(n.startswith(COMPILED_GRAPH_RANGES) for n in cols.names):
        graph_parts.append("torch.compile regions" + (
            " whose kernels the trace does not record" if tr.device == "cpu" else ""))
    rows.append(CheckRow("graphs and compiled code", not graph_parts,
                         "; ".join(graph_parts) if graph_parts else "none: eager ops"))
    # The recorded step ran under the profiler, which adds host time to every op call
    # it records (seen on the H200: GPT-2 small's training step took 54.7 ms in its trace
    # and 37.1 ms unprofiled, 1,651 op calls): overhead read here is an upper bound.
    # A compiled call costs more: torch.compile writes ~6 ranges a call only under a
    # profiler. Measured on the H200's host (benchmarks/results/h200/plain-traces-
    # profiler-cost.md, session o): a one-kernel compiled call 35-53 us bare, 71-110 us
    # profiled with CUDA activity and shapes; an eager add 16 us and 22 us.
    compiled = ("; torch.compile's calls more so (their host time about doubled under "
                "the profiler in a measurement on an H200's host)"
                if any(n.startswith(COMPILED_GRAPH_RANGES) for n in cols.names) else "")
    if step_s is None:
        cost = (f"{n_ops} op calls per step, each recorded with the profiler's own host "
                "time: the overhead share is an upper bound on the program's unprofiled "
                f"one{compiled}; --step-ms (the step's time without the profiler) reads "
                "it as the program runs")
    else:
        cost = (f"{n_ops} op calls per step, each recorded with the profiler's own host "
                f"time{compiled}: the traced steps took {fmt_s(tr.wall_s)}, "
                f"{tr.wall_s / step_s:.2f}x the {fmt_s(step_s)} given (--step-ms), which "
                "is T_wall")
    rows.append(CheckRow("profiler cost", True, cost))
    rows.append(CheckRow("events", cols.malformed == 0,
                         f"{cols.events} read" + (f"; {cols.malformed} malformed, left out"
                                                  if cols.malformed else "")))
    return rows


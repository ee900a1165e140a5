"""One trace -> the measured run (run.py) and the ceilings it is judged by: the source
`gobrrr analyze` reads, for one trace and for each rank's trace (dist/analyze.py).

header (read.py: which GPU) -> events streamed into columns (columns.py) -> its steps
(stepfind.py: ProfilerStep# ranges, else found) -> the averaged
profiled step (steps.py: counted ops, kernels, T_wall and busy time per step; opcount.py:
FLOPs and bytes from recorded shapes) and the wait for data (loading.py: the DataLoader
ranges) -> ceilings (ceilings.py) -> MeasuredRun.

Nothing is timed here: T_wall is the steps' span in the trace, so it carries the
profiler's own cost (a note says so), and no experiment can check the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gobrrr.errors import UserError
from gobrrr.fusion_estimate import fusable_bytes_saved
from gobrrr.hardware import Ceilings
from gobrrr.recorded import COMPILED_GRAPH_RANGES
from gobrrr.remedies.attention import find_attention
from gobrrr.report import Report
from gobrrr.run import MeasuredRun, Step
from gobrrr.timing import from_samples
from gobrrr.tracefile.ceilings import ceilings_for_trace
from gobrrr.tracefile.columns import TraceColumns, stream_trace
from gobrrr.tracefile.cpu_dispatch import empty_op_us
from gobrrr.tracefile.given_step import with_given_step
from gobrrr.tracefile.health import trace_check
from gobrrr.tracefile.loading import data_loading_in
from gobrrr.tracefile.read import TraceHeader
from gobrrr.tracefile.stepfind import find_steps
from gobrrr.tracefile.steps import MEDIAN_WALL_NOTE, TraceRun, analyse_steps
from gobrrr.units import fmt_s

__all__ = ["TraceAnalysis", "analyse_trace", "PROFILED_WALL_NOTE", "as_traced"]

# Where T_wall is the profiled steps' span (a source that timed its steps unprofiled,
# script.py, drops this note)
PROFILED_WALL_NOTE = ("times come from a profiled run: the profiler (more so with "
                      "record_shapes) adds CPU time to every op, so this overhead is an "
                      "upper bound of the unprofiled loop's (gobrrr doctor times it "
                      "unprofiled)")

Progress = Callable[[str], None]


@dataclass
class TraceAnalysis:
    """One trace analysed on its own: its averaged step (`tr`), its measured run and the
    ceilings it is judged by."""

    header: TraceHeader
    tr: TraceRun
    run: MeasuredRun
    ceilings: Ceilings

    @property
    def device(self) -> str:
        return self.run.device


def analyse_trace(header: TraceHeader, ceilings: Ceilings | None, say: Progress,
                  prepare: Callable[[TraceColumns], TraceColumns] | None = None,
                  cols: TraceColumns | None = None,
                  files: Sequence[str] | None = None, one_step: bool = False,
                  step_s: float | None = None) -> TraceAnalysis:
    """Stream one trace (unless `cols`, its columns, are given), find its steps
    (stepfind.py; `one_step`: one, for a source that profiled one call of its own), pick
    its ceilings (unless given), average its profiled steps. `prepare` transforms the
    columns first (dist/analyze.py takes communication out); `files`: every trace named,
    for the report's workload entry (the ranks of one job); `step_s`: the step's time
    measured without the profiler, T_wall in place of the traced span (given_step.py)."""
    if cols is None:
        say(f"reading {header.path.name}")
        cols = stream_trace(header.path)
    device = "cuda" if cols.has_device_activity else "cpu"
    cols = find_steps(cols, one_step=one_step)
    if prepare is not None:
        cols = prepare(cols)
    say(f"counting {len(cols.cpu['ts_us'])} CPU events and {len(cols.device['ts_us'])} "
        "device events, ops from their recorded shapes")
    empty_us = 0.0 if cols.has_device_activity else empty_op_us()
    tr = analyse_steps(cols, empty_op_us=empty_us)
    if not tr.run.counts.records:
        if device == "cpu" and any(n.startswith(COMPILED_GRAPH_RANGES) for n in cols.names):
            raise UserError(f"{header.path}: its work is torch.compile graphs, whose "
                            "Inductor C++ kernels a CPU trace does not record (their time "
                            "would read as overhead); gobrrr doctor on the workload counts "
                            "them")
        raise UserError(f"{header.path} has no operator events (cpu_op) inside its "
                        "profiled steps: nothing to analyse")
    if ceilings is None:
        ceil, ceil_notes = ceilings_for_trace(device, header.device_properties,
                                              header.torch_version, say)
    else:
        ceil, ceil_notes = ceilings, ["ceilings: given by the caller"]
    notes = list(cols.notes) + ceil_notes + tr.notes
    if device == "cpu":
        notes.insert(0, "the trace has no device activity: analysed on its CPU side; each "
                        "op's busy time is its recorded duration (with what it calls "
                        f"inside) less {empty_us:.2f} us, an empty op's recorded duration "
                        "on this CPU (dispatch, as doctor subtracts it; approximate for a "
                        "trace recorded on another machine); the rest of each step is "
                        "overhead")
    notes.append(PROFILED_WALL_NOTE)
    notes += _flow_notes(tr.run.counts.records)
    loading = data_loading_in(cols)
    if loading is not None:
        notes.append(f"data loading: {loading.source}")
    workload = _workload(header, tr.steps, device, tr.kernels_per_step, files)
    workload["trace"] |= {"step_rule": cols.step_rule.kind if cols.step_rule else "window",
                          "check": [r.to_dict() for r in trace_check(cols, tr, step_s)]}
    run = MeasuredRun(
        source="trace", workload=workload,
        device=device, timing=from_samples(tr.samples_s), wall_s=tr.wall_s, profile=tr.run,
        steps=[Step(name, wall_s) for name, wall_s in zip(tr.step_names, tr.samples_s,
                                                          strict=True)],
        notes=notes, data_loading=loading)
    if step_s is not None:
        run = with_given_step(run, step_s, _about_traced_wall, header.path.name)
    return TraceAnalysis(header, tr, run, ceil)


def _about_traced_wall(note: str) -> bool:
    """A note on T_wall as the traced span (replaced where the user gave the step)."""
    return note == PROFILED_WALL_NOTE or note.startswith(MEDIAN_WALL_NOTE)


def _flow_notes(records: Sequence[Any]) -> list[str]:
    """Where a remedy followed data between ops, how (flow.py): a trace names no
    tensors, so which op read which op's output is a guess from shapes."""
    uses = []
    if fusable_bytes_saved(list(records))[0] > 0:
        uses.append("the fusion estimate of the compile remedies")
    if attention := find_attention(list(records)):
        uses.append(f"the {len(attention)} hand-written attention chain(s) (QK^T, softmax, "
                    "PV) behind the SDPA remedy")
    if not uses:
        return []
    return [f"{' and '.join(uses)} link{'' if len(uses) > 1 else 's'} ops by tensor "
            "shapes and call order: a trace records no tensor identities, so each op is "
            "taken to read the latest tensor of its input's shape and dtype (a guess)"]


def _workload(header: TraceHeader, steps: int, device: str, kernels_per_step: float,
              files: Sequence[str] | None = None) -> dict[str, Any]:
    gpu = header.device_name
    where = f" on {gpu}" if gpu and device == "cuda" else " (CPU side)"
    return {
        "name": header.path.name,
        "description": f"torch.profiler trace, {steps} step(s){where}",
        "device": device,
        "batch_size": None,
        "source": "trace",
        "trace": {
            "files": list(files) if files else [header.path.name],
            "steps": steps,
            "torch": header.torch_version,
            "device_name": gpu,
            "record_shapes": header.record_shapes,
            "kernels_per_step": kernels_per_step,
            "distributed": header.distributed,
        },
    }


def as_traced(report: Report) -> Report:
    """`report` with its verdict marked where overhead was read from the profiled steps'
    span (PROFILED_WALL_NOTE still among its notes: no --step-ms): the profiler's own host
    time is in that span, so the share is an upper bound (on an H200 the compiled
    pointwise chain's traced calls took 80-141 us against 38-59 us unprofiled, and read
    overhead-bound where doctor reads memory-bound: plain-traces-analyze.md). The
    evidence says what the ops' time alone is bound by, the reading left if the host
    ran as fast as the program's."""
    v = report.verdict
    if v.regime != "overhead" or PROFILED_WALL_NOTE not in report.notes:
        return report
    parts = {k: s for k, s in report.budget.parts_s.items() if k != "overhead"}
    busy_s = sum(parts.values())
    if busy_s <= 0:
        return report
    top = max(parts, key=lambda k: parts[k])
    line = (f"as traced: T_wall is the profiled steps' span, which holds the profiler's "
            f"own host time, so this overhead is an upper bound of the program's; the "
            f"ops' time alone is {top}-bound ({fmt_s(parts[top])} of {fmt_s(busy_s)}); "
            "--step-ms (the step's time without the profiler) reads it as the program runs")
    return replace(report, verdict=replace(v, as_traced=True,
                                           evidence=[line, *v.evidence]))

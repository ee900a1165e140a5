"""`gobrrr analyze`: the Report of a torch.profiler trace recorded elsewhere, the same
Report `gobrrr doctor` makes (so the terminal, --json and --html renderers read it as
they are), built from the trace instead of from runs of the workload.

file -> header (tracefile.read_header: which GPU, which ranks) -> events streamed into
columns (tracestream) -> the averaged profiled step (tracesteps: counted ops, kernels,
T_wall and busy time per step; tracecount: FLOPs and bytes from recorded shapes) ->
ceilings (traceceilings) -> budget -> verdict and remedies -> Report. Several traces,
the ranks of one job: each rank this way, then its communication and rank 0's merge
(dist/analyze.py).

Nothing is timed here: T_wall is the steps' span in the trace, so it carries the
profiler's own cost (a note says so), and no experiment can check the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gobrrr.errors import UserError
from gobrrr.hardware import Ceilings
from gobrrr.report import Report
from gobrrr.timing import Timing
from gobrrr.tracefile.read import TraceHeader, read_header

if TYPE_CHECKING:
    from gobrrr.budget import Budget
    from gobrrr.tracefile.columns import TraceColumns
    from gobrrr.tracefile.steps import TraceRun

__all__ = ["analyze", "check_traces", "analyse_trace", "report_of", "TraceAnalysis"]

Progress = Callable[[str], None]


def check_traces(paths: Sequence[str | Path]) -> list[TraceHeader]:
    """The headers of the traces to analyse: one trace, or several as the ranks of one
    distributed job (each with a `distributedInfo`: distinct ranks, one world size), in
    rank order; every other case is one UserError line."""
    if not paths:
        raise UserError("give a trace file (a torch.profiler .json or .json.gz)")
    headers = [read_header(p) for p in paths]
    if len(headers) == 1:
        return headers
    for h in headers:
        info = h.distributed or {}
        if not isinstance(info.get("rank"), int) or not isinstance(info.get("world_size"),
                                                                   int):
            raise UserError(f"{len(headers)} traces: several traces go together only as "
                            f"ranks of one job, and {h.path.name} has no distributedInfo "
                            "(rank, world_size); analyze one trace at a time")
    infos = [h.distributed or {} for h in headers]
    sizes = sorted({i["world_size"] for i in infos})
    if len(sizes) > 1:
        raise UserError(f"{len(headers)} traces of different world sizes {sizes}: not ranks "
                        "of one job; analyze one trace at a time")
    ranks = [i["rank"] for i in infos]
    dup = next((r for r in ranks if ranks.count(r) > 1), None)
    if dup is not None:
        raise UserError(f"{len(headers)} traces but two are rank {dup}: not ranks of one "
                        "job; analyze one trace at a time")
    if any(not 0 <= r < sizes[0] for r in ranks):
        raise UserError(f"ranks {sorted(ranks)} do not fit a world size of {sizes[0]}")
    return sorted(headers, key=lambda h: (h.distributed or {})["rank"])


@dataclass
class TraceAnalysis:
    """One trace analysed on its own: its averaged step and the ceilings it is judged by
    (analyze's single-trace path, also each rank's in dist/analyze.py)."""

    header: TraceHeader
    tr: TraceRun
    device: str  # "cuda" | "cpu"
    ceilings: Ceilings
    notes: list[str]  # the stream's, the ceilings' and the steps' notes


def analyse_trace(header: TraceHeader, ceilings: Ceilings | None, say: Progress,
                  prepare: Callable[[TraceColumns], TraceColumns] | None = None,
                  cols: TraceColumns | None = None) -> TraceAnalysis:
    """Stream one trace (unless `cols`, its columns, are given), pick its ceilings
    (unless given), average its profiled steps. `prepare` transforms the columns first
    (dist/analyze.py takes communication out)."""
    from gobrrr.tracefile.ceilings import ceilings_for_trace
    from gobrrr.tracefile.columns import stream_trace
    from gobrrr.tracefile.steps import analyse_steps

    if cols is None:
        say(f"reading {header.path.name}")
        cols = stream_trace(header.path)
    device = "cuda" if cols.has_device_activity else "cpu"
    if prepare is not None:
        cols = prepare(cols)
    say(f"counting {len(cols.cpu['ts_us'])} CPU events and {len(cols.device['ts_us'])} "
        "device events, ops from their recorded shapes")
    tr = analyse_steps(cols)
    if not tr.run.counts.records:
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
                        "inside), the rest of each step is overhead")
    notes.append("times come from a profiled run: the profiler (more so with "
                 "record_shapes) adds CPU time to every op, so this overhead is an upper "
                 "bound of the unprofiled loop's (gobrrr doctor times it unprofiled)")
    return TraceAnalysis(header, tr, device, ceil, notes)


def _timing(samples_s: list[float]) -> Timing:
    """The steps' spans as the timer's statistics (one call per sample: one step)."""
    from gobrrr.timing import summarize

    med, iqr, lo, hi = summarize(samples_s)
    rel = iqr / med if med > 0 else 0.0
    return Timing(median_s=med, iqr_s=iqr, min_s=lo, max_s=hi, n_samples=len(samples_s),
                  calls_per_sample=1, warmup_calls=0, noisy=rel > 0.05, rel_iqr=rel,
                  samples_s=tuple(samples_s))


def analyze(paths: Sequence[str | Path], *, ceilings: Ceilings | None = None,
            progress: Progress | None = None) -> Report:
    """The Report of one profiler trace (module docstring), or of the ranks of one job
    merged (dist/analyze.py); `ceilings` overrides the choice of traceceilings (tests, or
    ceilings measured elsewhere)."""
    from gobrrr.budget import compute_budget

    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    headers = check_traces(paths)
    if len(headers) > 1:
        from gobrrr.dist.analyze import analyze_ranks

        return analyze_ranks(headers, ceilings=ceilings, progress=say)
    a = analyse_trace(headers[0], ceilings, say)
    return report_of(a, compute_budget(a.tr.run, a.tr.wall_s, a.ceilings), t0)


def report_of(a: TraceAnalysis, budget: Budget, t0: float,
              files: Sequence[str] | None = None) -> Report:
    """The Report of one analysed trace with its budget (`files`: every trace named)."""
    from gobrrr.verdict import remedies_for, verdict_for

    counts = a.tr.run.counts
    verdict = verdict_for(budget, counts, a.ceilings, a.device, None, None)
    remedies = remedies_for(budget, counts, a.ceilings, a.device, None, None)
    return Report(
        workload=_workload(a.header, a.tr.steps, a.device, a.tr.kernels_per_step, files),
        ceilings=a.ceilings, timing=_timing(a.tr.samples_s), counts=counts, budget=budget,
        verdict=verdict, remedies=remedies, diagnose_s=time.perf_counter() - t0,
        notes=a.notes + _flow_notes(counts.records) + budget.notes)


def _flow_notes(records: Sequence[Any]) -> list[str]:
    """Where a remedy followed data between ops, how (traceflow.py): a trace names no
    tensors, so which op read which op's output is a guess from shapes."""
    from gobrrr.budget import fusable_bytes_saved
    from gobrrr.remedies.attention import find_attention

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

"""`gobrrr analyze`: the Report of torch.profiler traces recorded elsewhere, the same
Report `gobrrr doctor` makes (so the terminal, --json and --html renderers read it as
they are), built from the trace instead of from runs of the workload.

One trace: the trace source (tracefile/analysis.py) -> the one end (diagnosis.py).
Several traces, the ranks of one job: each rank that way, then its communication and
rank 0's merge (dist/analyze.py). Which traces go together is checked here first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gobrrr.diagnosis import report_for
from gobrrr.dist.analyze import analyze_ranks
from gobrrr.errors import UserError
from gobrrr.hardware import Ceilings
from gobrrr.report import Report
from gobrrr.tracefile.analysis import analyse_trace, as_traced
from gobrrr.tracefile.read import TraceHeader, read_header

__all__ = ["analyze", "check_traces"]

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


def analyze(paths: Sequence[str | Path], *, ceilings: Ceilings | None = None,
            progress: Progress | None = None, step_s: float | None = None) -> Report:
    """The Report of one profiler trace (module docstring), or of the ranks of one job
    merged (dist/analyze.py); `ceilings` overrides the choice of trace ceilings (tests, or
    ceilings measured elsewhere); `step_s`: the step's time measured without the
    profiler, T_wall of every rank in place of the traced span
    (tracefile/given_step.py)."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    headers = check_traces(paths)
    if len(headers) > 1:
        return as_traced(analyze_ranks(headers, ceilings=ceilings, progress=say,
                                       step_s=step_s))
    a = analyse_trace(headers[0], ceilings, say, step_s=step_s)
    return as_traced(report_for(a.run, a.ceilings, started_s=t0))

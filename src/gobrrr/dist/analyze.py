"""`gobrrr analyze RANK0 RANK1 ...`: the traces of the ranks of one distributed job,
recorded elsewhere, merged into one Report as `gobrrr doctor` under torchrun merges its
ranks (merge.py): rank 0's report with a `distributed` section.

Per rank, in rank order:
1. the trace source (tracefile/analysis.analyse_trace) on the trace's columns with the
   communication taken out (`without_communication`): NCCL kernels (marked by the
   profiler's collective metadata, tracestream's `comm` column) leave the device activity,
   and collective ops (`c10d::*`, trace.is_collective) with what they run inside leave
   the CPU events, so neither counts as an op's memory or compute time nor as busy time
   (doctor drops the same kernels: diagnose._drop_collective_kernels);
2. its communication inside the profiled steps (the `ProfilerStep#` ranges, else the
   steps tracefile/stepfind.py finds, a slow first one kept so that the ranks agree;
   first start to last end): commread.read_columns, the reader doctor uses on its own window, on the
   columns that step 1 streamed (before the communication was taken out), so each
   rank's trace is read once and never whole into memory;
3. the collectives matched across ranks (comm.match_collectives: process group and
   order), each rank's pace from its trace (accounting.trace_paces), its exposed
   transfer and waiting (accounting.account, the one rule),
   and its budget with the fourth part (budget.with_communication).
Then merge.merge, with no no_sync experiment, topology, communication ceilings or
timeout (a trace from elsewhere has none of them), and the one end (diagnosis.py) with
rank 0's run and the merged section.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from gobrrr.diagnosis import budget_for, report_for
from gobrrr.dist.accounting import account, trace_paces
from gobrrr.dist.comm import RankTrace, match_collectives
from gobrrr.dist.commread import group_name, read_columns
from gobrrr.dist.merge import merge, summarize_rank
from gobrrr.errors import UserError
from gobrrr.hardware import Ceilings
from gobrrr.intervals import union
from gobrrr.phases import is_collective
from gobrrr.report import Report
from gobrrr.run import MeasuredRun
from gobrrr.tracefile.analysis import TraceAnalysis, analyse_trace
from gobrrr.tracefile.columns import CPU_OP, STEP_PREFIX, TraceColumns, stream_trace
from gobrrr.tracefile.read import TraceHeader
from gobrrr.tracefile.stepfind import find_steps

__all__ = ["analyze_ranks", "without_communication", "rank_comm", "FROM_TRACES_NOTE",
           "SAME_JOB_GAP_S"]

Progress = Callable[[str], None]

STEP_RANGES = STEP_PREFIX

FROM_TRACES_NOTE = (
    "traces recorded elsewhere: no unprofiled timing and no no_sync experiment, so T_wall "
    "is the profiled steps' span and waiting for a late rank comes from the profiled "
    "steps. The profiler slows each rank's CPU side by its own amount, which can make one "
    "rank look late: on two H200s (examples:ddp_comm) each all-reduce started 300-450 us "
    "later on rank 1 in the profile, while the unprofiled paces differed by 0.41 ms per "
    "step (gobrrr doctor under torchrun estimates waiting from those paces); of several "
    "profiled steps, the one that waited least is taken: a late rank is late in every "
    "step; and no rank is taken to wait longer than the slowest rank's pace in its trace "
    "(its host's own time or its GPU's work, whichever is longer) minus its own: a "
    "host-bound rank's collective launched early spins on a GPU that would be idle")


def without_communication(cols: TraceColumns) -> TraceColumns:
    """The columns without communication work (module docstring, step 1), of columns
    whose steps are set (stepfind.find_steps)."""
    assert cols.steps, "find_steps first: every trace with CPU events has a step"
    dev = cols.device
    keep_dev = dev["comm"] == 0
    cpu = cols.cpu
    coll_name = np.array([is_collective(n) for n in cols.names] or [False], dtype=bool)
    is_coll = coll_name[cpu["name"]] & (cpu["kind"] == CPU_OP) if len(cpu["name"]) else \
        np.zeros(0, dtype=bool)
    drop = np.zeros(len(cpu["ts_us"]), dtype=bool)
    for thread in np.unique(cpu["thread"][is_coll]).tolist():
        mine = is_coll & (cpu["thread"] == thread)
        # a zero-length collective op keeps its window: the events at its timestamp are
        # inside it (the test below is closed at the end)
        ws, we = union(cpu["ts_us"][mine], cpu["ts_us"][mine] + cpu["dur_us"][mine],
                       keep_empty=True)
        on = np.flatnonzero(cpu["thread"] == thread)
        ts = cpu["ts_us"][on]
        k = np.searchsorted(ws, ts, side="right") - 1
        inside = (k >= 0) & (ts <= we[np.maximum(k, 0)])
        drop[on[inside]] = True
    keep_cpu = ~drop
    out = replace(cols, cpu={k: v[keep_cpu] for k, v in cpu.items()},
                  device={k: v[keep_dev] for k, v in dev.items()}, notes=list(cols.notes))
    n_k, n_ops = int((~keep_dev).sum()), int(is_coll.sum())
    if n_k or n_ops:
        out.notes.append(f"communication taken out of the per-op budget: {n_k} collective "
                         f"kernel(s) (the profiler's collective metadata) and {n_ops} "
                         "collective op call(s) (c10d) with what ran inside them; their "
                         "time is the communication part")
    return out


def rank_comm(header: TraceHeader, cols: TraceColumns, rank: int, steps: int,
              device: str) -> RankTrace:
    """The rank's communication inside its profiled steps (module docstring, step 2),
    from the trace's streamed columns."""
    try:
        return read_columns(cols, rank, steps, device, window=STEP_RANGES,
                            group=group_name(header.distributed))
    except ValueError:
        raise UserError(f"{header.path.name} (rank {rank}): no profiled steps to match "
                        "its communication in") from None


# Ranks of one job profile the same steps at the same moments; traces whose recorded
# spans lie further apart than this are two runs (the probe merged two jobs 20 s apart
# and invented a straggler). Generous: hosts' clocks are NTP-synchronised to
# milliseconds, and a rank may start its profiler a few steps late.
SAME_JOB_GAP_S = 10.0


def _span_s(header: TraceHeader, cols: TraceColumns) -> tuple[float, float] | None:
    """(first, last) moment of the trace's events in seconds since the epoch, from
    Kineto's `baseTimeNanoseconds` (its events' `ts` are microseconds after it); None
    where the trace does not say it (a trace trimmed by hand)."""
    base = header.meta.get("baseTimeNanoseconds")
    parts = [(p["ts_us"], p["ts_us"] + p["dur_us"]) for p in (cols.cpu, cols.device)
             if len(p["ts_us"])]
    if not isinstance(base, (int, float)) or isinstance(base, bool) or not parts:
        return None
    lo = min(float(a.min()) for a, _ in parts)
    hi = max(float(b.max()) for _, b in parts)
    return base * 1e-9 + lo * 1e-6, base * 1e-9 + hi * 1e-6


def _check_one_job(spans: list[tuple[int, str, tuple[float, float] | None]]) -> None:
    """One UserError line when two ranks' traces were recorded apart in time."""
    known = [(r, name, s) for r, name, s in spans if s is not None]
    for i, (r1, n1, (lo1, hi1)) in enumerate(known):
        for r2, n2, (lo2, hi2) in known[i + 1:]:
            gap = max(lo1, lo2) - min(hi1, hi2)
            if gap > SAME_JOB_GAP_S:
                raise UserError(f"{n1} (rank {r1}) and {n2} (rank {r2}) were recorded "
                                f"{gap:.0f} s apart: not ranks of one job; analyze one "
                                "trace at a time")


def analyze_ranks(headers: list[TraceHeader], *, ceilings: Ceilings | None = None,
                  progress: Progress | None = None,
                  run_of: Callable[[int, MeasuredRun], MeasuredRun] | None = None,
                  facts_for: Callable[[Any], dict[str, Any]] | None = None,
                  first_notes: Sequence[str] = (FROM_TRACES_NOTE,),
                  step_s: float | None = None) -> Report:
    """The merged Report of the ranks' traces (module docstring); `headers` in rank
    order, already checked to be one job's (analyze.check_traces). A source that timed
    the ranks itself (`gobrrr run` under torchrun: script.py) passes `run_of` (rank, the
    trace's run -> the run with its own timing, read before the accounting), `facts_for`
    (the merged section -> the remedies' facts) and its own `first_notes`. `step_s`:
    the job's step time measured without the profiler (`analyze --step-ms`), every rank's
    T_wall (a synchronous job's ranks step together)."""
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    info0 = headers[0].distributed or {}
    world_size = int(info0["world_size"])
    files = [h.path.name for h in headers]
    analyses: list[TraceAnalysis] = []
    traces: list[RankTrace] = []
    spans: list[tuple[int, str, tuple[float, float] | None]] = []
    for h in headers:
        rank = int((h.distributed or {})["rank"])
        say(f"rank {rank}: {h.path.name}")
        say(f"reading {h.path.name}")
        # once: the per-op pass and the communication pass, in the same steps (a slow
        # first one kept: the ranks must agree on which steps they ran)
        cols = find_steps(stream_trace(h.path), drop_warmup=False)
        spans.append((rank, h.path.name, _span_s(h, cols)))
        _check_one_job(spans)
        a = analyse_trace(h, ceilings, say, prepare=without_communication, cols=cols,
                          files=files, step_s=step_s)
        ceilings = ceilings or a.ceilings  # one job, one kind of GPU: rank 0's choice
        analyses.append(a)
        say(f"rank {rank}: communication in the profiled steps")
        traces.append(rank_comm(h, cols, rank, a.tr.steps, a.device))
        del cols
    devices = {a.device for a in analyses}
    if len(devices) > 1:
        raise UserError(f"ranks' traces disagree on the device ({sorted(devices)}): some "
                        "have device activity and some do not; not ranks of one job")
    if len(headers) < world_size:
        say(f"{len(headers)} of {world_size} ranks given: collectives are matched among "
            "those")
    matched, match_notes = match_collectives(traces)
    paces = trace_paces(traces, matched) if len(traces) == world_size else None
    runs: list[MeasuredRun] = []
    summaries = []
    for a, t in zip(analyses, traces, strict=True):
        timed = a.run if run_of is None else run_of(t.rank, a.run)
        acc = account(t, matched, timed.wall_s, None, paces_s=paces)
        run = replace(timed, communication_s=acc.communication_s)
        runs.append(run)
        summaries.append(summarize_rank(t.rank, budget_for(run, a.ceilings), t, acc,
                                        host=a.header.meta.get("host_name"),
                                        trace_path=a.header.path.name))
    tail = []
    if len(headers) < world_size:
        tail.append(f"{len(headers)} of the job's {world_size} ranks given: collectives "
                    "matched among those ranks only")
    if not matched:
        tail.append("no collective was found on every rank inside the profiled steps: no "
                    "transfer/waiting split")
    section = merge(summaries, world_size=world_size,
                    backend=str(info0.get("backend", "?")), device=analyses[0].device,
                    experiments=False, notes_first=[*first_notes, *match_notes],
                    notes_last=tail)
    return report_for(runs[0], analyses[0].ceilings, distributed=section, started_s=t0,
                      facts=None if facts_for is None else facts_for(section))

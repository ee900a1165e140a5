"""`gobrrr doctor` under torchrun: every rank diagnoses its own share of the job in
lockstep, rank 0 merges.

Per rank, in this order (each a Lockstep.stage: a rank that raises stops every rank):
1. the target: every rank's target string and file hash must agree;
2. the workload, from the factory on every rank (it wraps its model in DDP or FSDP2);
3. calibration: rank 0 first, then the others (one machine's cache, written once);
4. T_wall: timing.measure_ranks with the Lockstep as coordinator (every rank the same
   number of calls);
5. the no_sync experiment (experiments.py), when the workload reaches a DDP module (or,
   for FSDP2, the step with its parameters kept unsharded);
6. the profiled steps: lead-in calls, then STEPS calls inside the WINDOW range, under
   torch.profiler (CPU, and CUDA kernels on a GPU); the exported Chrome trace gives the
   collectives and the compute intervals (comm.py);
7. FLOPs, bytes and op times: the single-process path. On CUDA the profiled counted call
   (its lead-in sized from rank 0's T_wall, so every rank makes the same calls), minus
   the kernels of collective ops. On CPU each distinct op of one counted call is replayed
   alone on every rank, *except* collectives (trace.is_collective): those are never
   replayed, their time is the profiled steps'. Replays are local ops and need no
   lockstep; the one counted call runs on every rank.
8. every rank's collectives and no_sync paces to every rank (the control group): each
   rank's exposed communication per call is accounting.account's (transfer in kernel
   seconds per step on CUDA; waiting estimated from the no_sync paces when DDP's
   experiment ran, the profiled waiting otherwise: accounting.py says why).

Every rank's measured run (run.py, with its exposed communication) and summary
(merge.RankSummary); rank 0 gathers the summaries, merges them with the topology, the
cached communication ceilings and the projection (merge.py, context.py) and ends with the
one end (diagnosis.py), the merged section and the communication facts of the DDP and
FSDP2 remedies beside the run. Every other rank returns its own report.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gobrrr.diagnosis import budget_for, report_for
from gobrrr.dist import experiments as dx
from gobrrr.dist.accounting import PROFILED_WAITING_NOTE, TRACE_PACES, account, trace_pace
from gobrrr.dist.ceilings import load_cached
from gobrrr.dist.comm import WINDOW, RankTrace, match_collectives
from gobrrr.dist.commread import read_trace
from gobrrr.dist.context import comm_facts, model_bytes
from gobrrr.dist.lockstep import DistError, Lockstep, World, setup
from gobrrr.dist.merge import ProjectionInputs, merge, summarize_rank
from gobrrr.dist.topology import topology
from gobrrr.errors import WARNING
from gobrrr.hardware import calibrate
from gobrrr.phases import is_collective
from gobrrr.profile import profile_counted
from gobrrr.remedies.base import reached_facts
from gobrrr.report import Report
from gobrrr.run import MeasuredRun, ProfiledRun, Step
from gobrrr.state import preserved_globals, preserved_state, walk
from gobrrr.timing import device_sync, measure_ranks
from gobrrr.tracefile.columns import STEP_PREFIX

__all__ = ["diagnose_distributed", "profile_steps", "target_fingerprint", "STEPS",
           "LEAD_IN_STEPS"]

Progress = Callable[[str], None]

# Profiled steps inside the window (their exposed communication is averaged), and steps
# before it inside the profiler: the profiler's start costs each rank a different time,
# and a first collective after it would show that skew as waiting.
STEPS = 3
LEAD_IN_STEPS = 2


@dataclass
class DistOptions:
    time_budget_s: float = 1.0
    timeout_s: float = 60.0
    experiments: bool = True
    trace_dir: Path | None = None  # keep each rank's profiled trace here
    inter_node_gbps: float | None = None  # the projection's inter-node bandwidth, Gb/s
    topology: dict[str, Any] | None = None  # default: dist.topology.topology() on rank 0


def target_fingerprint(target: str | None) -> str:
    """The target string and, for FILE.py:NAME, a hash of the file: ranks that would run
    different code disagree here, before anything runs."""
    if target and ":" in target and not target.startswith(("examples:", "hf:", "timm:",
                                                           "torchvision:")):
        path = Path(target.rpartition(":")[0])
        if path.is_file():
            return f"{target} sha256:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    return str(target)


def profile_steps(fn: Callable[[], Any], ls: Lockstep, device: str, steps: int = STEPS,
                  trace_path: Path | None = None) -> RankTrace:
    """STEPS calls of `fn` in the WINDOW range under the profiler, every rank the same
    calls; this rank's Chrome trace read into a RankTrace (saved at `trace_path`)."""
    import warnings

    from torch.profiler import ProfilerActivity, profile, record_function

    sync = device_sync(device)
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # record_shapes: gloo's ranges carry the message's dims and dtype only with it
        with profile(activities=activities, record_shapes=True) as prof:
            for _ in range(LEAD_IN_STEPS):
                fn()
            sync()
            ls.all_gather(None, "starting the profiled steps")  # one start for all
            with record_function(WINDOW):
                for i in range(steps):
                    # each step also a ProfilerStep#N range, as prof.step() writes: the
                    # ranges `gobrrr analyze` (and HTA) take steps from, so the traces
                    # kept by --rank-traces can be analysed
                    with record_function(f"{STEP_PREFIX}{i}"):
                        fn()
                sync()
    with tempfile.TemporaryDirectory() as tmp:
        path = trace_path or Path(tmp) / "trace.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(path))
        # A few steps' trace, read whole: doctor needs no ijson (analyze streams, for
        # traces of any size recorded elsewhere).
        return read_trace(json.loads(path.read_text()), ls.rank, steps, device)


def _account(ls: Lockstep, trace: RankTrace, wall_s: float, nosync: Any) -> Any:
    """This rank's CommAccount: the collectives of every rank (to match them) and every
    rank's no_sync pace, exchanged on the control group. Without no_sync paces (no
    experiment ran: --no-experiments, a step DDP's or FSDP2's does not wrap) each rank's
    pace from its own trace (accounting.trace_pace, CUDA) is exchanged instead, as
    `gobrrr analyze` takes them from the ranks' traces: the exchanged traces leave out
    the compute intervals a pace is read from."""
    mine = (trace.to_dict() | {"compute": [], "blocked": [], "bucket_copy": []},
            nosync.no_sync_s if nosync is not None else None)
    got = ls.all_gather(mine, "sharing the collectives")
    traces = [RankTrace.from_dict(t) for t, _ in got]
    matched, _notes = match_collectives(traces)
    paces = {r: float(p) for r, (_t, p) in enumerate(got) if p is not None}
    no_sync_s = paces if len(paces) == len(got) else None
    paces_s = None
    if no_sync_s is None:
        own = ls.all_gather(trace_pace(trace, matched), "sharing the paces")
        if all(p is not None for p in own):
            paces_s = {r: float(p) for r, p in enumerate(own)}
    return account(trace, matched, wall_s, no_sync_s,
                   nosync.bound_fraction if nosync is not None else None, paces_s=paces_s)


def diagnose_distributed(world: World, target: str | None, device: str,
                         load: Callable[[], Any], opts: DistOptions,
                         progress: Progress | None = None) -> Report:
    """Every rank: the steps of the module docstring. Returns the Report of this rank's
    measured run; rank 0's carries the merged `distributed` section (the others' None).
    Raises DistError (every rank) when a rank fails."""
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    ctrl, backend = setup(world, device, opts.timeout_s)
    ls = Lockstep(world, ctrl, opts.timeout_s)
    mine = target_fingerprint(target)
    targets = ls.all_gather(mine, "checking the target")
    if len(set(targets)) > 1:
        odd = next(r for r, t in enumerate(targets) if t != targets[0])
        raise DistError(f"ranks disagree on the target: rank 0 runs {targets[0]!r}, "
                        f"rank {odd} runs {targets[odd]!r}")
    say(f"rank {world.rank} of {world.size} ({backend}); building the workload")
    w = ls.stage("building the workload", load)
    notes: list[str] = []

    def cal() -> Any:
        with preserved_globals():
            return calibrate(w.device, progress=say if world.rank == 0 else None)

    # Rank 0 calibrates alone first: the others then read the cache it wrote (the same
    # machine), instead of racing to write one file and loading each other's cores.
    first = ls.stage("calibrating (rank 0)", lambda: cal() if world.rank == 0 else None)
    ceil = first if world.rank == 0 else None
    later = ls.stage("calibrating", lambda: cal() if world.rank != 0 else None)
    ceil = ceil or later
    assert ceil is not None  # every rank calibrated in one of the two stages
    notes += ceil.notes
    with preserved_state(w) as state:
        say("timing the step in lockstep on every rank")
        wall, walls = ls.stage("timing", lambda: measure_ranks(
            lambda: w.run("timing"), device=w.device, budget_s=opts.time_budget_s,
            coordinator=ls))
        nosync = None
        if opts.experiments:
            say("experiment: the step without communication (DDP's no_sync(), or FSDP2's "
                "parameters kept unsharded) vs with it")
            nosync = ls.stage("the no_sync experiment", lambda: dx.no_sync_times(
                w, ls, opts.time_budget_s))
        say(f"profiling {STEPS} steps on every rank")
        trace_path = (opts.trace_dir / f"rank{world.rank}.json"
                      if opts.trace_dir is not None else None)
        trace = ls.stage("profiling steps", lambda: profile_steps(
            lambda: w.run("the profiled steps"), ls, w.device, STEPS, trace_path))
        say("counting FLOPs and bytes per op" + (" in a profiled run" if w.device == "cuda"
                                                 else ", timing each op alone"))
        if w.device == "cuda":
            # the kernels of collective ops are communication, from the profiled steps
            profiled = ls.stage("the profiled counted call", lambda: _without_collectives(
                profile_counted(w, walls[0].median_s)))
        else:
            profiled = ls.stage("counting", lambda: profile_counted(w))
    for line in state.warnings:
        notes.append(f"{WARNING}{line}")
    acc = _account(ls, trace, wall.median_s, nosync)
    if (trace.source == "cuda" and acc.waiting_source not in ("no_sync paces", TRACE_PACES)
            and acc.waiting_profiled_s > 0):
        notes.append(PROFILED_WAITING_NOTE)
    run = MeasuredRun(source="ranks", workload=w.to_dict(), device=w.device, timing=wall,
                      wall_s=wall.median_s, profile=profiled,
                      steps=[Step(w.name, wall.median_s)], notes=notes,
                      communication_s=acc.communication_s)
    summary = summarize_rank(world.rank, budget_for(run, ceil), trace, acc,
                             host=os.uname().nodename, no_sync=nosync,
                             trace_path=str(trace_path) if trace_path else None,
                             local_rank=world.local_rank)
    gathered = ls.gather(summary, "gathering every rank's result")
    facts = reached_facts(w)
    if gathered is None:  # not rank 0: this rank's own report, no merged section
        return report_for(run, ceil, state=state, facts=facts, started_s=t0)
    say("rank 0: topology, communication ceilings, projection")
    topo = opts.topology if opts.topology is not None else topology()
    comm_ceil = load_cached(topo)
    grad_bytes, param_bytes = model_bytes(w)
    section = merge(gathered, world_size=world.size, backend=backend, device=w.device,
                    timeout_s=opts.timeout_s, comm_ceilings=comm_ceil, topology=topo,
                    experiments=opts.experiments,
                    projection=ProjectionInputs(grad_bytes, param_bytes,
                                                opts.inter_node_gbps))
    modules = walk(w.fn, w.args, w.kwargs).modules
    return report_for(run, ceil, state=state, distributed=section, started_s=t0,
                      facts=facts | {"comm": comm_facts(modules, section, world.size,
                                                        comm_ceil)})


def _without_collectives(run: ProfiledRun) -> ProfiledRun:
    return run.without_records({r.index for r in run.counts.records
                                if is_collective(r.op)})

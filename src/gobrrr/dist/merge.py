"""Rank 0's merge: every rank's summary (RankSummary) -> the report's `distributed`
section (Distributed, typed, built in one call), and the evidence lines the verdict
gains from it. Data in, data out; measures nothing.

Per rank: its four-way split (overhead, memory, compute, communication) and its exposed
communication split into transfer and waiting, each rank's own accounting.CommAccount
(computed on that rank, the one rule: accounting.py), with the profiled waiting beside
the estimate, DDP's bucket copies, and the comparison with the no_sync bound.
Stragglers: for each collective matched across ranks, the late rank (the shortest
duration) makes every peer wait; each peer's waiting per step (its estimate, where the
no_sync experiment gave one) is attributed to the late ranks in those shares
(accounting.caused_waiting), per peer; a rank is named a straggler when that waiting
reaches STRAGGLER_FRACTION of the median step time and it arrived last in at least
STRAGGLER_LATE_SHARE of the collectives.
Collectives: grouped by (collective, message size), with their median transfer time and
achieved bus bandwidth (comm.bandwidth_gbps); "% of the measured ceiling" is filled only
when ceilings are given (`comm_ceilings`, calibrate --distributed's CommCeilings): the
achieved busbw over the calibrated busbw at that message size.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from gobrrr.budget import Budget
from gobrrr.dist.accounting import (
    PROFILED_WAITING_NOTE,
    TRACE_PACES,
    CommAccount,
    caused_waiting,
    no_sync_comparison,
)
from gobrrr.dist.comm import RankTrace, match_collectives
from gobrrr.dist.context import CALIBRATE_HINT, projection_for
from gobrrr.dist.experiments import FSDP_METHOD, NoSync
from gobrrr.units import fmt_pct, fmt_s

__all__ = ["merge", "summarize_rank", "RankSummary", "RankRow", "Straggler", "StepTime",
           "CollectiveGroup", "ProjectionInputs", "Distributed", "evidence",
           "STRAGGLER_FRACTION"]

# A rank whose lateness costs each peer at least this share of the step is a straggler:
# far above the skew of a loaded 2-core CI machine's ranks (a few % of a step, seen).
STRAGGLER_FRACTION = 0.10
# ... and is the last to arrive in at least this share of the collectives: lateness that
# moves from rank to rank (a loaded machine's noise) names no one.
STRAGGLER_LATE_SHARE = 2 / 3

_GAP = ("no_sync also removes DDP's bucket copies and its division by the world size, "
        "and (GPU) the slowdown of compute kernels that share SMs with NCCL (CPU: gloo's "
        "threads share the cores): an upper bound, above the trace's figure by that work")
_GAP_FSDP = ("keeping FSDP2's parameters unsharded also removes its copies into and out "
             "of the all-gather and reduce-scatter buffers, the freeing and re-allocating "
             "of the unsharded parameters and the optimizer's update of the shards (no "
             "gradient reaches them), and (GPU) the slowdown of compute kernels sharing "
             "SMs with NCCL (CPU: gloo's threads share the cores): an upper bound, above "
             "the trace's figure by that work")


@dataclass(frozen=True)
class RankSummary:
    """What one rank contributes to the merge, built in one call on that rank
    (`summarize_rank`): its budget's parts, its collectives, its communication account
    and its no_sync reading."""

    rank: int
    host: str | None
    wall_s: float
    parts_s: dict[str, float]  # overhead, memory, compute, communication
    fractions: dict[str, float]
    regime: str
    trace: RankTrace
    account: CommAccount
    no_sync: NoSync | None = None
    trace_path: str | None = None
    local_rank: int | None = None


def summarize_rank(rank: int, budget: Budget, trace: RankTrace, account: CommAccount, *,
                   host: str | None, no_sync: NoSync | None = None,
                   trace_path: str | None = None,
                   local_rank: int | None = None) -> RankSummary:
    return RankSummary(rank, host, budget.wall_s, budget.parts_s, budget.fractions,
                       budget.regime, trace, account, no_sync, trace_path, local_rank)


@dataclass(frozen=True)
class RankRow:
    """One rank in the section: its four-way split and its exposed communication."""

    rank: int
    host: str | None
    wall_s: float
    seconds: dict[str, float]
    fractions: dict[str, float]
    regime: str
    communication_total_s: float
    exposed_transfer_s: float
    exposed_waiting_s: float
    exposed_waiting_profiled_s: float
    waiting_source: str
    time_basis: str
    ddp_bucket_copy_s: float
    collectives: int
    trace_path: str | None
    no_sync: dict[str, Any] | None
    no_sync_comparison: dict[str, Any] | None


@dataclass(frozen=True)
class Straggler:
    rank: int
    peer_waiting_s: float  # each peer's waiting per step it causes
    share_of_step: float
    late_in: int  # collectives it arrived last in
    collectives: int


@dataclass(frozen=True)
class StepTime:
    median_s: float
    per_rank_s: dict[str, float]
    spread: float  # (max - min) / median of the ranks' steps
    busy_per_rank_s: dict[str, float]


@dataclass(frozen=True)
class CollectiveGroup:
    """The collectives of one kind and message size."""

    collective: str
    bytes: int | None
    calls_per_step: float
    transfer_us_median: float
    waiting_us_max_median: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    ceiling_busbw_gbps: float | None
    pct_of_ceiling: float | None


@dataclass(frozen=True)
class ProjectionInputs:
    """What the projection to more GPUs needs beyond the merged ranks (context.py)."""

    grad_bytes: int
    param_bytes: int
    inter_node_gbps: float | None = None


@dataclass(frozen=True)
class Distributed:
    """The report's `distributed` section: rank 0's merge of every rank (module
    docstring), built in one call (`merge`), rendered from `to_dict()`."""

    world_size: int
    backend: str
    device: str
    match: str
    ranks: list[RankRow]
    step_time: StepTime
    stragglers: list[Straggler]
    straggler_threshold: float
    collectives: list[CollectiveGroup]
    ceilings_busbw_gbps: dict[str, float] | None
    ceilings_source: str | None
    topology: dict[str, Any] | None
    no_sync_gap: str | None
    notes: list[str]
    timeout_s: float | None = None  # None: no process group (traces from elsewhere)
    # the projection to more GPUs (context.projection_for): None where none was made
    projection: dict[str, Any] | None = None
    projection_bandwidth: str | None = None
    projection_check: dict[str, Any] | None = None
    projected: bool = False  # the projection was attempted (doctor under torchrun)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"world_size": self.world_size, "backend": self.backend,
                             "device": self.device}
        if self.timeout_s is not None:
            d["timeout_s"] = self.timeout_s
        d |= {"match": self.match, "ranks": [asdict(r) for r in self.ranks],
              "step_time": asdict(self.step_time),
              "stragglers": [asdict(s) for s in self.stragglers],
              "straggler_threshold": self.straggler_threshold,
              "collectives": [asdict(c) for c in self.collectives],
              "ceilings_busbw_gbps": self.ceilings_busbw_gbps,
              "ceilings_source": self.ceilings_source, "topology": self.topology,
              "no_sync_gap": self.no_sync_gap, "notes": self.notes}
        if self.projected:
            d |= {"projection": self.projection,
                  "projection_bandwidth": self.projection_bandwidth,
                  "projection_check": self.projection_check}
        return d

    def evidence(self, rank: int = 0) -> list[str]:
        """The verdict's lines from this section (every number from it)."""
        return evidence(self.to_dict(), rank)


def merge(summaries: list[RankSummary], *, world_size: int, backend: str, device: str,
          timeout_s: float | None = None, comm_ceilings: Any | None = None,
          topology: dict[str, Any] | None = None, experiments: bool = True,
          projection: ProjectionInputs | None = None,
          notes_first: Sequence[str] = (), notes_last: Sequence[str] = ()) -> Distributed:
    """The section (module docstring) from every rank's summary, in rank order.
    `projection`: project the step to more GPUs (doctor under torchrun: the model's
    bytes are known); `notes_first`, `notes_last`: the caller's notes around the
    merge's own."""
    traces = [g.trace for g in summaries]
    matched, notes = match_collectives(traces)
    walls = {g.rank: g.wall_s for g in summaries}
    median_wall = statistics.median(walls.values())
    ranks = []
    for g in summaries:
        a = g.account
        no_sync = g.no_sync.to_dict() if g.no_sync is not None else None
        ranks.append(RankRow(
            g.rank, g.host, walls[g.rank],
            {k: g.parts_s[k] for k in ("overhead", "memory", "compute", "communication")},
            g.fractions, g.regime, a.communication_total_s, a.transfer_s, a.waiting_s,
            a.waiting_profiled_s, a.waiting_source, a.time_basis, a.ddp_bucket_copy_s,
            len(g.trace.collectives), g.trace_path, no_sync,
            no_sync_comparison(a.to_dict(), no_sync)))
        notes += g.trace.notes
    accounts = [g.account for g in summaries]
    if any(a.waiting_source not in ("no_sync paces", TRACE_PACES) and a.waiting_profiled_s > 0
           and a.time_basis == "kernel seconds" for a in accounts):
        notes.append(PROFILED_WAITING_NOTE)
    paces = {g.rank: g.no_sync.no_sync_s for g in summaries
             if g.no_sync is not None and g.no_sync.no_sync_s is not None}
    caused = caused_waiting(matched, accounts, paces if len(paces) == len(summaries)
                            else None)
    late = {r.rank: 0 for r in ranks}
    for m in matched:
        late[m.late_rank] += 1
    peers = max(1, world_size - 1)
    waits = {r: c / peers for r, c in caused.items()}
    stragglers = [Straggler(r, s, s / median_wall, late[r], len(matched))
                  for r, s in sorted(waits.items(), key=lambda p: -p[1])
                  if median_wall > 0 and s / median_wall >= STRAGGLER_FRACTION
                  and late[r] >= STRAGGLER_LATE_SHARE * len(matched)]
    spread = ((max(walls.values()) - min(walls.values())) / median_wall
              if median_wall > 0 else 0.0)
    busy = {r.rank: r.seconds["compute"] + r.seconds["memory"] for r in ranks}
    fsdp = any(g.no_sync is not None and g.no_sync.method == FSDP_METHOD for g in summaries)
    section = Distributed(
        world_size=world_size, backend=backend, device=device,
        # NCCL kernels on torch 2.11 (the H200s) carried no "Seq": order it is, there too
        match=("process-group name and sequence number where the profiler recorded "
               "one, else the order in the profiled window" if device == "cuda" else
               "process group and order in the profiled window (gloo records no "
               "sequence number)"),
        ranks=ranks,
        step_time=StepTime(median_wall, {str(k): v for k, v in walls.items()}, spread,
                           {str(k): v for k, v in busy.items()}),
        stragglers=stragglers, straggler_threshold=STRAGGLER_FRACTION,
        collectives=_grouped(matched, max(1, traces[0].steps) if traces else 1,
                             comm_ceilings),
        ceilings_busbw_gbps=_peaks(comm_ceilings),
        ceilings_source=(None if comm_ceilings is None else
                         f"gobrrr calibrate --distributed ({comm_ceilings.source}, "
                         f"measured {comm_ceilings.measured_at})"),
        topology=topology,
        no_sync_gap=None if not experiments else _GAP_FSDP if fsdp else _GAP,
        notes=[*notes_first, *notes], timeout_s=timeout_s)
    if projection is None:
        return replace(section, notes=[*section.notes, *notes_last])
    if comm_ceilings is None:
        notes.append(CALIBRATE_HINT)
    proj = projection_for(section.to_dict(), projection.grad_bytes, projection.param_bytes,
                          comm_ceilings, projection.inter_node_gbps)
    return replace(section, notes=[*notes_first, *notes, *proj["notes"], *notes_last],
                   projection=proj["projection"],
                   projection_bandwidth=proj["projection_bandwidth"],
                   projection_check=proj["projection_check"], projected=True)


def _peaks(ceil: Any | None) -> dict[str, float] | None:
    """Each calibrated collective's highest bus bandwidth, GB/s."""
    if ceil is None:
        return None
    names = sorted({p.collective for p in ceil.points})
    return {n: ceil.peak_busbw(n) / 1e9 for n in names}


def _ceiling_gbps(ceil: Any | None, name: str, nbytes: int | None) -> float | None:
    """The calibrated busbw (GB/s) of `name` at `nbytes` (nccl-tests' S, as the trace's
    sizes are), or None without ceilings, a size, or that collective's curve."""
    if ceil is None or not nbytes or not ceil.curve(name):
        return None
    return float(ceil.busbw_at(name, nbytes)) / 1e9


def _grouped(matched: list[Any], steps: int, ceilings: Any | None
             ) -> list[CollectiveGroup]:
    groups: dict[tuple[str, int | None], list[Any]] = {}
    for m in matched:
        groups.setdefault((m.name, m.bytes), []).append(m)
    out = []
    for (name, nbytes), ms in sorted(groups.items(), key=lambda p: -len(p[1])):
        busbw = [m.busbw_gbps for m in ms if m.busbw_gbps is not None]
        algbw = [m.algbw_gbps for m in ms if m.algbw_gbps is not None]
        bus = statistics.median(busbw) if busbw else None
        ceil = _ceiling_gbps(ceilings, name, nbytes)
        out.append(CollectiveGroup(
            name, nbytes, len(ms) / steps, statistics.median(m.transfer_us for m in ms),
            statistics.median(max(m.waiting_us(r) for r in m.dur_us) for m in ms),
            statistics.median(algbw) if algbw else None, bus, ceil,
            bus / ceil if bus is not None and ceil else None))
    return out


def evidence(d: dict[str, Any], rank: int = 0) -> list[str]:
    """The verdict's lines from the distributed section (every number from it)."""
    r = next(x for x in d["ranks"] if x["rank"] == rank)
    source = r.get("waiting_source")
    est = {"no_sync paces": "from the ranks' no_sync paces",
           "the least of the profiled steps": "in the profiled step that waited least",
           TRACE_PACES: "from the ranks' paces in their traces"}.get(source or "")
    lines = [f"exposed communication {fmt_pct(r['fractions'].get('communication', 0))} "
             f"of the step on rank {rank} ({fmt_s(r['exposed_transfer_s'])} transfer, "
             f"{fmt_s(r['exposed_waiting_s'])} waiting for a late rank"
             + (f" {est} ({fmt_s(r['exposed_waiting_profiled_s'])} in the profiled steps"
                " on average, where the profiler delays CPU launches)"
                if est else "") + "; "
             f"{fmt_s(r['communication_total_s'])} of collectives in all, the rest hidden "
             "behind compute)"]
    for s in d["stragglers"]:
        lines.append(f"straggler: rank {s['rank']} makes each peer wait "
                     f"{fmt_s(s['peer_waiting_s'])} per step ({fmt_pct(s['share_of_step'])}"
                     f" of the step; last to arrive in {s['late_in']} of {s['collectives']}"
                     " collectives)")
    ns = r.get("no_sync")
    cmp = r.get("no_sync_comparison")
    if ns and ns.get("bound_s") is not None and cmp:
        lines.append(f"under {ns.get('method') or 'DDP no_sync()'} the step takes "
                     f"{fmt_s(ns['no_sync_s'])} instead "
                     f"of {fmt_s(ns['sync_s'])} ({fmt_pct(cmp['bound_fraction'])} of the "
                     "step); gobrrr: exposed communication "
                     f"{fmt_pct(cmp['exposed_fraction'])}"
                     f", with DDP's bucket copies {fmt_pct(cmp['with_bucket_copies_fraction'])}"
                     f": {cmp['explanation']}")
    elif ns and ns.get("skipped"):
        lines.append(f"no no_sync experiment: {ns['skipped']}")
    return lines

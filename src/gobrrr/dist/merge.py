"""Rank 0's merge: every rank's summary -> the report's `distributed` section, and the
evidence lines the verdict gains from it. Data in, data out; measures nothing.

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
from dataclasses import replace
from typing import Any

from gobrrr.dist.accounting import (
    PROFILED_WAITING_NOTE,
    CommAccount,
    caused_waiting,
    no_sync_comparison,
)
from gobrrr.dist.comm import RankTrace, match_collectives
from gobrrr.dist.experiments import FSDP_METHOD
from gobrrr.units import fmt_pct, fmt_s

__all__ = ["merge", "with_distributed", "STRAGGLER_FRACTION"]

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


def merge(gathered: list[dict[str, Any]], *, world_size: int, backend: str, device: str,
          timeout_s: float, comm_ceilings: Any | None = None,
          topology: dict[str, Any] | None = None, experiments: bool = True
          ) -> dict[str, Any]:
    traces = [RankTrace.from_dict(g["trace"]) for g in gathered]
    matched, notes = match_collectives(traces)
    walls = {g["rank"]: g["timing"]["median_s"] for g in gathered}
    median_wall = statistics.median(walls.values())
    accounts = [CommAccount(**{k: v for k, v in g["account"].items()
                               if k != "communication_s"}) for g in gathered]
    ranks = []
    for g, t, a in zip(gathered, traces, accounts, strict=True):
        wall = walls[g["rank"]]
        b = g["budget"]
        ranks.append({
            "rank": g["rank"], "host": g.get("host"), "wall_s": wall,
            "seconds": {k: b[f"{k}_s"] for k in ("overhead", "memory", "compute",
                                                  "communication")},
            "fractions": b["fractions"], "regime": b["regime"],
            "communication_total_s": a.communication_total_s,
            "exposed_transfer_s": a.transfer_s,
            "exposed_waiting_s": a.waiting_s,
            "exposed_waiting_profiled_s": a.waiting_profiled_s,
            "waiting_source": a.waiting_source,
            "time_basis": a.time_basis,
            "ddp_bucket_copy_s": a.ddp_bucket_copy_s,
            "collectives": len(t.collectives), "trace_path": g.get("trace_path"),
            "no_sync": g.get("no_sync"),
            "no_sync_comparison": no_sync_comparison(a.to_dict(), g.get("no_sync")),
        })
        notes += t.notes
    if any(a.waiting_source == "profiled steps" and a.waiting_profiled_s > 0
           and a.time_basis == "kernel seconds" for a in accounts):
        notes.append(PROFILED_WAITING_NOTE)
    paces = {g["rank"]: g["no_sync"]["no_sync_s"] for g in gathered
             if (g.get("no_sync") or {}).get("no_sync_s") is not None}
    caused = caused_waiting(matched, accounts, paces if len(paces) == len(gathered)
                            else None)
    late = {r["rank"]: 0 for r in ranks}
    for m in matched:
        late[m.late_rank] += 1
    peers = max(1, world_size - 1)
    waits = {r: c / peers for r, c in caused.items()}
    stragglers = [{"rank": r, "peer_waiting_s": s, "share_of_step": s / median_wall,
                   "late_in": late[r], "collectives": len(matched)}
                  for r, s in sorted(waits.items(), key=lambda p: -p[1])
                  if median_wall > 0 and s / median_wall >= STRAGGLER_FRACTION
                  and late[r] >= STRAGGLER_LATE_SHARE * len(matched)]
    spread = ((max(walls.values()) - min(walls.values())) / median_wall
              if median_wall > 0 else 0.0)
    busy = {r["rank"]: r["seconds"]["compute"] + r["seconds"]["memory"] for r in ranks}
    return {
        "world_size": world_size, "backend": backend, "device": device,
        "timeout_s": timeout_s,
        # NCCL kernels on torch 2.11 (the H200s) carried no "Seq": order it is, there too
        "match": ("process-group name and sequence number where the profiler recorded "
                  "one, else the order in the profiled window" if device == "cuda" else
                  "process group and order in the profiled window (gloo records no "
                  "sequence number)"),
        "ranks": ranks,
        "step_time": {"median_s": median_wall, "per_rank_s": {str(k): v for k, v in
                                                               walls.items()},
                      "spread": spread,
                      "busy_per_rank_s": {str(k): v for k, v in busy.items()}},
        "stragglers": stragglers,
        "straggler_threshold": STRAGGLER_FRACTION,
        "collectives": _grouped(matched, max(1, traces[0].steps) if traces else 1,
                                comm_ceilings),
        "ceilings_busbw_gbps": _peaks(comm_ceilings),
        "ceilings_source": (None if comm_ceilings is None else
                            f"gobrrr calibrate --distributed ({comm_ceilings.source}, "
                            f"measured {comm_ceilings.measured_at})"),
        "topology": topology,
        "no_sync_gap": (None if not experiments else _GAP_FSDP if any(
            (g.get("no_sync") or {}).get("method") == FSDP_METHOD for g in gathered)
            else _GAP),
        "notes": notes,
    }


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
             ) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int | None], list[Any]] = {}
    for m in matched:
        groups.setdefault((m.name, m.bytes), []).append(m)
    out = []
    for (name, nbytes), ms in sorted(groups.items(), key=lambda p: -len(p[1])):
        busbw = [m.busbw_gbps for m in ms if m.busbw_gbps is not None]
        algbw = [m.algbw_gbps for m in ms if m.algbw_gbps is not None]
        bus = statistics.median(busbw) if busbw else None
        ceil = _ceiling_gbps(ceilings, name, nbytes)
        out.append({
            "collective": name, "bytes": nbytes, "calls_per_step": len(ms) / steps,
            "transfer_us_median": statistics.median(m.transfer_us for m in ms),
            "waiting_us_max_median": statistics.median(
                max(m.waiting_us(r) for r in m.dur_us) for m in ms),
            "algbw_gbps": statistics.median(algbw) if algbw else None,
            "busbw_gbps": bus,
            "ceiling_busbw_gbps": ceil,
            "pct_of_ceiling": bus / ceil if bus is not None and ceil else None,
        })
    return out


def evidence(d: dict[str, Any], rank: int = 0) -> list[str]:
    """The verdict's lines from the distributed section (every number from it)."""
    r = next(x for x in d["ranks"] if x["rank"] == rank)
    est = r.get("waiting_source") == "no_sync paces"
    lines = [f"exposed communication {fmt_pct(r['fractions'].get('communication', 0))} "
             f"of the step on rank {rank} ({fmt_s(r['exposed_transfer_s'])} transfer, "
             f"{fmt_s(r['exposed_waiting_s'])} waiting for a late rank"
             + (f" from the ranks' no_sync paces ({fmt_s(r['exposed_waiting_profiled_s'])}"
                " in the profiled steps, where the profiler delays CPU launches)"
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
        lines.append(f"under {ns.get('method') or 'DDP no_sync()'} the step takes {fmt_s(ns['no_sync_s'])} instead "
                     f"of {fmt_s(ns['sync_s'])} ({fmt_pct(cmp['bound_fraction'])} of the "
                     f"step); gobrrr: exposed communication {fmt_pct(cmp['exposed_fraction'])}"
                     f", with DDP's bucket copies {fmt_pct(cmp['with_bucket_copies_fraction'])}"
                     f": {cmp['explanation']}")
    elif ns and ns.get("skipped"):
        lines.append(f"no no_sync experiment: {ns['skipped']}")
    return lines


def with_distributed(report: Any, d: dict[str, Any]) -> Any:
    """The report with its distributed section and the verdict's evidence from it."""
    v = report.verdict
    verdict = replace(v, evidence=[*evidence(d), *v.evidence])
    return replace(report, distributed=d, verdict=verdict)

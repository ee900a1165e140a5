"""Rank 0's merge: every rank's summary -> the report's `distributed` section, and the
evidence lines the verdict gains from it. Data in, data out; measures nothing.

Per rank: its four-way split (overhead, memory, compute, communication) and its exposed
communication split into transfer and waiting (comm.exposed_split_us), scaled to T_wall
like the budget's communication (a fraction of the profiled window).
Stragglers: for each collective matched across ranks, the late rank (the shortest
duration) makes every peer wait (their duration minus its own). The waiting each rank
causes, per call and per peer, is summed; the rank causing the most is named a straggler
when that waiting reaches STRAGGLER_FRACTION of the median step time and it arrived
last in at least STRAGGLER_LATE_SHARE of the collectives.
Collectives: grouped by (collective, message size), with their median transfer time and
achieved bus bandwidth (comm.bandwidth_gbps); "% of the measured ceiling" is filled only
when ceilings are given (`ceilings_busbw_gbps`, from calibrate --distributed).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from gobrrr.dist.comm import RankTrace, exposed_split_us, match_collectives
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


def merge(gathered: list[dict[str, Any]], *, world_size: int, backend: str, device: str,
          timeout_s: float, ceilings_busbw_gbps: dict[str, float] | None = None,
          topology: dict[str, Any] | None = None, experiments: bool = True
          ) -> dict[str, Any]:
    traces = [RankTrace.from_dict(g["trace"]) for g in gathered]
    matched, notes = match_collectives(traces, ceilings_busbw_gbps)
    walls = {g["rank"]: g["timing"]["median_s"] for g in gathered}
    median_wall = statistics.median(walls.values())
    ranks = []
    for g, t in zip(gathered, traces, strict=True):
        wall = walls[g["rank"]]
        per_call = wall / t.window_us if t.window_us > 0 else 0.0  # us of window -> s
        transfer_us, waiting_us = exposed_split_us(t, matched)
        b = g["budget"]
        ranks.append({
            "rank": g["rank"], "host": g.get("host"), "wall_s": wall,
            "seconds": {k: b[f"{k}_s"] for k in ("overhead", "memory", "compute",
                                                  "communication")},
            "fractions": b["fractions"], "regime": b["regime"],
            "communication_total_s": t.comm_us * per_call,
            "exposed_transfer_s": transfer_us * per_call,
            "exposed_waiting_s": waiting_us * per_call,
            "collectives": len(t.collectives), "trace_path": g.get("trace_path"),
            "no_sync": g.get("no_sync"),
        })
        notes += t.notes
    steps = max(1, traces[0].steps) if traces else 1
    caused = {r["rank"]: 0.0 for r in ranks}
    late = {r["rank"]: 0 for r in ranks}
    for m in matched:
        caused[m.late_rank] += sum(m.waiting_us(r) for r in m.dur_us) * 1e-6
        late[m.late_rank] += 1
    peers = max(1, world_size - 1)
    # seconds each peer waits per call for rank r, on the profiled clock scaled to T_wall
    window_s = statistics.median(t.window_us for t in traces) * 1e-6 / steps if traces else 0
    scale = median_wall / window_s if window_s > 0 else 0.0
    waits = {r: c / steps / peers * scale for r, c in caused.items()}
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
        "match": ("process-group name and sequence number" if device == "cuda" else
                  "process group and order in the profiled window (gloo records no "
                  "sequence number)"),
        "ranks": ranks,
        "step_time": {"median_s": median_wall, "per_rank_s": {str(k): v for k, v in
                                                               walls.items()},
                      "spread": spread,
                      "busy_per_rank_s": {str(k): v for k, v in busy.items()}},
        "stragglers": stragglers,
        "straggler_threshold": STRAGGLER_FRACTION,
        "collectives": _grouped(matched, steps, ceilings_busbw_gbps),
        "ceilings_busbw_gbps": ceilings_busbw_gbps,
        "topology": topology,
        "no_sync_gap": _GAP if experiments else None,
        "notes": notes,
    }


def _grouped(matched: list[Any], steps: int, ceilings: dict[str, float] | None
             ) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int | None], list[Any]] = {}
    for m in matched:
        groups.setdefault((m.name, m.bytes), []).append(m)
    out = []
    for (name, nbytes), ms in sorted(groups.items(), key=lambda p: -len(p[1])):
        busbw = [m.busbw_gbps for m in ms if m.busbw_gbps is not None]
        algbw = [m.algbw_gbps for m in ms if m.algbw_gbps is not None]
        bus = statistics.median(busbw) if busbw else None
        ceil = (ceilings or {}).get(name)
        out.append({
            "collective": name, "bytes": nbytes, "calls_per_step": len(ms) / steps,
            "transfer_us_median": statistics.median(m.transfer_us for m in ms),
            "waiting_us_max_median": statistics.median(
                max(m.waiting_us(r) for r in m.dur_us) for m in ms),
            "algbw_gbps": statistics.median(algbw) if algbw else None,
            "busbw_gbps": bus,
            "pct_of_ceiling": bus / ceil if bus is not None and ceil else None,
        })
    return out


def evidence(d: dict[str, Any], rank: int = 0) -> list[str]:
    """The verdict's lines from the distributed section (every number from it)."""
    r = next(x for x in d["ranks"] if x["rank"] == rank)
    lines = [f"exposed communication {fmt_pct(r['fractions'].get('communication', 0))} "
             f"of the step on rank {rank} ({fmt_s(r['exposed_transfer_s'])} transfer, "
             f"{fmt_s(r['exposed_waiting_s'])} waiting for a late rank; "
             f"{fmt_s(r['communication_total_s'])} of collectives in all, the rest hidden "
             "behind compute)"]
    for s in d["stragglers"]:
        lines.append(f"straggler: rank {s['rank']} makes each peer wait "
                     f"{fmt_s(s['peer_waiting_s'])} per step ({fmt_pct(s['share_of_step'])}"
                     f" of the step; last to arrive in {s['late_in']} of {s['collectives']}"
                     " collectives)")
    ns = r.get("no_sync")
    if ns and ns.get("bound_s") is not None:
        lines.append(f"under DDP no_sync() the step takes {fmt_s(ns['no_sync_s'])} instead "
                     f"of {fmt_s(ns['sync_s'])}: exposed communication is at most "
                     f"{fmt_pct(ns['bound_fraction'])} of the step (the trace: "
                     f"{fmt_pct(r['fractions'].get('communication', 0))}); {d['no_sync_gap']}")
    elif ns and ns.get("skipped"):
        lines.append(f"no no_sync experiment: {ns['skipped']}")
    return lines


def with_distributed(report: Any, d: dict[str, Any]) -> Any:
    """The report with its distributed section and the verdict's evidence from it."""
    v = report.verdict
    verdict = replace(v, evidence=[*evidence(d), *v.evidence])
    return replace(report, distributed=d, verdict=verdict)

"""Re-run gobrrr's communication accounting (gobrrr.dist.accounting) over saved rank
traces and the reports of the run that profiled them, without a GPU.

    python benchmarks/dist_reaccount.py X2_DIR [--json OUT.json]

X2_DIR holds CASE.json (rank 0's merged report: each rank's T_wall and no_sync timings,
which are unprofiled and cannot be re-derived from a trace) and traces_CASE/rank{0,1}.json
(the profiled windows, doctor's --rank-traces). Prints, per case and rank: exposed
transfer, the profiled and the estimated waiting, DDP's bucket copies, gobrrr's exposed
communication share (and with the bucket copies) beside the no_sync bound, and the
straggler the merge would name.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from gobrrr.dist.accounting import account, caused_waiting, no_sync_comparison
from gobrrr.dist.comm import match_collectives
from gobrrr.dist.commread import read_trace
from gobrrr.dist.merge import STRAGGLER_FRACTION


def reaccount(report_path: Path, trace_dir: Path) -> dict[str, Any]:
    rep = json.loads(report_path.read_text())
    d = rep["distributed"]
    ranks = sorted(d["ranks"], key=lambda r: r["rank"])
    steps = 3  # dist.diagnose.STEPS when these traces were recorded
    traces = [read_trace(trace_dir / f"rank{r['rank']}.json", r["rank"], steps, d["device"])
              for r in ranks]
    matched, _notes = match_collectives(traces)
    paces = {r["rank"]: r["no_sync"]["no_sync_s"] for r in ranks
             if (r.get("no_sync") or {}).get("no_sync_s") is not None}
    paces_or_none = paces if len(paces) == len(ranks) else None
    accs = [account(t, matched, r["wall_s"], paces_or_none) for t, r in zip(traces, ranks,
                                                                            strict=True)]
    median_wall = statistics.median(r["wall_s"] for r in ranks)
    caused = caused_waiting(matched, accs, paces_or_none)
    peers = max(1, len(ranks) - 1)
    out = {"ranks": [], "stragglers": []}
    for a, r in zip(accs, ranks, strict=True):
        cmp = no_sync_comparison(a.to_dict(), r.get("no_sync"))
        out["ranks"].append({
            "rank": a.rank, "wall_s": r["wall_s"], **a.to_dict(),
            "communication_fraction": a.communication_s / r["wall_s"],
            "old_communication_fraction": r["fractions"].get("communication"),
            "no_sync": r.get("no_sync"), "no_sync_comparison": cmp})
    for rank, s in caused.items():
        share = s / peers / median_wall
        if share >= STRAGGLER_FRACTION:
            out["stragglers"].append({"rank": rank, "share_of_step": share})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("x2_dir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    results = {}
    for rep in sorted(args.x2_dir.glob("*.json")):
        tdir = args.x2_dir / f"traces_{rep.stem}"
        if not tdir.is_dir():
            continue
        res = reaccount(rep, tdir)
        results[rep.stem] = res
        for r in res["ranks"]:
            cmp = r["no_sync_comparison"] or {}
            print(f"{rep.stem:14s} rank {r['rank']}: transfer {r['transfer_s'] * 1e3:.2f} ms, "
                  f"waiting {r['waiting_s'] * 1e3:.2f} ms ({r['waiting_source']}; profiled "
                  f"{r['waiting_profiled_s'] * 1e3:.2f}), bucket copies "
                  f"{r['ddp_bucket_copy_s'] * 1e3:.2f} ms | comm "
                  f"{r['communication_fraction']:.1%} (was {r['old_communication_fraction']:.1%})"
                  f", +copies {cmp.get('with_bucket_copies_fraction', float('nan')):.1%}, "
                  f"no_sync bound {cmp.get('bound_fraction', float('nan')):.1%}")
        print(f"{rep.stem:14s} stragglers: "
              + (", ".join(f"rank {s['rank']} ({s['share_of_step']:.1%})"
                           for s in res["stragglers"]) or "none"))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

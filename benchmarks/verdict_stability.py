"""Does doctor's verdict hold from one run to the next (issue 25, item 2)? The same
`gobrrr doctor TARGET --device cpu --json -q` run R times in fresh processes on each of
several workloads, in an interleaved order (round 1 of every workload, then round 2, ...),
on this CPU as it is (run it beside other work: the issue asks "under load"; the load
average is recorded with every run).

A run's stated regimes: {verdict.regime}, or {regime, runner_up} where the verdict is
uncertain (their share ranges overlap, and the verdict names both). A confident run is
contradicted when another run of the same workload states regimes that exclude its one:
the failure the issue asks never to see. Also counted: runs whose regime differs from the
workload's most common one (flips, confident or not).

  python benchmarks/verdict_stability.py --rounds 10 --out F.json [--targets a,b,...]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# Regimes of three kinds and a real model's inference and training step; each run took
# 50-160 s on this 2-core CPU beside other work (load average 5-7).
TARGETS = ["examples:mlp", "examples:matmul", "examples:pointwise",
           "hf:gpt2 --seq-len 64", "hf:gpt2 --train --seq-len 32 --batch-size 2"]


def doctor(target: str) -> dict:
    cmd = [sys.executable, "-m", "gobrrr", "doctor", *target.split(), "--device", "cpu",
           "--json", "-q"]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"target": target, "error": p.stderr[-1500:], "wall_s": wall}
    d = json.loads(p.stdout)
    v = d["verdict"]
    stated = [v["regime"]] + ([v["runner_up"]] if v.get("uncertain") else [])
    return {"target": target, "regime": v["regime"], "share": v["share"],
            "share_range": v.get("share_range"), "runner_up": v.get("runner_up"),
            "runner_up_range": v.get("runner_up_range"), "uncertain": v.get("uncertain"),
            "stated": stated, "fractions": d["fractions"],
            "t_wall_s": d["timing"]["median_s"], "samples": len(d["timing"]["samples_s"]),
            "rel_iqr": d["timing"].get("rel_iqr"), "contention": d.get("contention"),
            "parts_s": d["budget"].get("parts_s"),
            "wall_s": wall, "load_1min": [load0, os.getloadavg()[0]]}


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    regimes = collections.Counter(r["regime"] for r in ok)
    common = regimes.most_common(1)[0][0] if ok else None
    contradicted = sum(1 for r in ok if not r["uncertain"] and any(
        r["regime"] not in o["stated"] for o in ok if o is not r))
    return {"runs": len(runs), "errors": len(runs) - len(ok), "regimes": dict(regimes),
            "uncertain": sum(1 for r in ok if r["uncertain"]),
            "flips": sum(1 for r in ok if r["regime"] != common),
            "confident_contradicted": contradicted,
            "share_min_max": [min(r["share"] for r in ok), max(r["share"] for r in ok)]
            if ok else None}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--out", required=True)
    a = p.parse_args()
    targets = a.targets.split(",")
    runs: dict[str, list[dict]] = {t: [] for t in targets}
    out = Path(a.out)
    for i in range(a.rounds):
        for t in targets:
            r = doctor(t)
            runs[t].append(r)
            print(f"round {i + 1} {t}: {r.get('regime', 'ERROR')} "
                  f"{r.get('share', 0):.3f} uncertain={r.get('uncertain')} "
                  f"load {r.get('load_1min')} {r['wall_s']:.0f} s", flush=True)
            out.write_text(json.dumps({"runs": runs, "summary": {
                k: summarize(v) for k, v in runs.items()}}, indent=1))
    for k, v in runs.items():
        print(k, summarize(v))


if __name__ == "__main__":
    main()

"""Issue 23's host-bound rows against doctor's own repeatability (CPU; reads session s's
`reanalysed.json`, `benchmarks/plain_traces_reanalyze.py`'s output).

Session s recorded the two host-bound workloads (the GPT-2 training step, the compiled
pointwise chain) three times each in one process on one H200, doctor after each
recording. This compares doctor with itself on the same workload (the largest share
difference between two of its runs, in points) and each analysis (from the traced span,
and with the user's step as `--step-ms`) with the nearest doctor run and with the
doctor run recorded beside it.

    python benchmarks/doctor_spread_check.py [DIR ...]
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

SHARES = ("overhead", "memory", "compute")
DEFAULT = Path(__file__).resolve().parent / "results/h200/session-2026-12-04s/plain2"


def gap(a: dict[str, float], b: dict[str, float]) -> float:
    """The largest difference of one share, in points."""
    return 100 * max(abs(a[k] - b[k]) for k in SHARES)


def main() -> None:
    dirs = [Path(p) for p in sys.argv[1:]] or [DEFAULT]
    rows = [r for d in dirs for r in json.loads((d / "reanalysed.json").read_text())]
    by_workload: dict[str, list[dict]] = {}
    for r in rows:
        by_workload.setdefault(r["workload"], []).append(r)
    print("| workload | doctor runs | doctor vs doctor, points (largest) | analyze from the "
          "span: vs its doctor / nearest doctor | analyze --step-ms: vs its doctor / "
          "nearest doctor |")
    print("|---|---|---|---|---|")
    for name, rs in by_workload.items():
        docs = [r["doctor"]["fractions"] for r in rs]
        self_gap = max((gap(a, b) for a, b in itertools.combinations(docs, 2)), default=0.0)
        span = [(gap(r["analyze"]["fractions"], r["doctor"]["fractions"]),
                 min(gap(r["analyze"]["fractions"], d) for d in docs)) for r in rs]
        given = [(gap(r["analyze_given"]["fractions"], r["doctor"]["fractions"]),
                  min(gap(r["analyze_given"]["fractions"], d) for d in docs))
                 for r in rs if r.get("analyze_given")]
        print(f"| {name} | {len(docs)} | {self_gap:.1f} | "
              f"{', '.join(f'{a:.1f} / {b:.1f}' for a, b in span)} | "
              f"{', '.join(f'{a:.1f} / {b:.1f}' for a, b in given)} |")


if __name__ == "__main__":
    main()

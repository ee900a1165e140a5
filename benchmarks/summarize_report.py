"""One line per gobrrr JSON report (doctor or analyze), for device-machine logs: regime,
fractions, wall time per step, the three costliest ops with their bound and limit, and the
first three remedies with their predicted speedups.

Usage: python3 benchmarks/summarize_report.py LABEL REPORT.json [LABEL REPORT.json ...]
"""

from __future__ import annotations

import json
import sys


def _roof(fraction: float | None) -> str:
    return "no roof (no work counted)" if fraction is None else f"{fraction:.0%} of roof"


def summary(label: str, path: str) -> str:
    d = json.load(open(path))
    b = d["budget"]
    ops = sorted(b["per_op"], key=lambda o: -o["time_s"])[:3]
    top = ", ".join(f"{o['name']} {o['time_s'] * 1e3:.3g} ms {o['bound']}/{o['limit']} "
                    f"{_roof(o['roofline_fraction'])}" for o in ops)
    rem = ", ".join(f"{r['name']} {r['predicted_speedup']:.3g}x" for r in d["remedies"][:3])
    fr = {k: round(v, 3) for k, v in d["fractions"].items()}
    return (f"{label}: {d['regime']} {fr} wall {b['wall_s'] * 1e3:.4g} ms; top ops: {top}; "
            f"remedies: {rem or 'none'}")


if __name__ == "__main__":
    args = sys.argv[1:]
    for label, path in zip(args[::2], args[1::2], strict=False):
        try:
            print(summary(label, path))
        except (OSError, ValueError, KeyError) as exc:
            print(f"{label}: unreadable report {path}: {exc}")

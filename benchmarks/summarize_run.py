"""A `gobrrr run` report in a few lines, for device-machine logs: the steps found, the
verdict (and its cause), the step's phases, the wait for data, the first remedies.

Usage: python3 benchmarks/summarize_run.py REPORT.json [REPORT.json ...]
"""

from __future__ import annotations

import json
import sys


def summary(path: str) -> str:
    d = json.load(open(path))
    w, v = d["workload"], d["verdict"]
    s = w.get("script", {})
    lines = [f"{w['name']}: steps from {s.get('steps_from')}, {s.get('timed')} timed; "
             f"{d['regime']} {v['share']:.0%} of {d['budget']['wall_s'] * 1e3:.4g} ms"
             + (f" (cause: {v['cause']})" if v.get("cause") else ""),
             "  phases: " + ", ".join(f"{k} {p['seconds'] * 1e3:.3g} ms ({p['share']:.0%})"
                                      for k, p in d["phases"].items())]
    dl = d.get("data_loading")
    if dl:
        lines.append(f"  data loading: host {dl['host_s'] * 1e3:.3g} ms, exposed "
                     f"{dl['exposed_s'] * 1e3:.3g} ms, device busy "
                     f"{dl['device_busy_share']:.0%} of the wait")
    for r in d["remedies"][:4]:
        how = r["how"].splitlines()[0]
        lines.append(f"  {r['spec']}: {r['predicted_speedup']:.3g}x: {how}")
    return "\n".join(lines)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(summary(p))

"""Issue 24 item 4's check, offline: each remedy's prediction in a doctor report against
the speedup `gobrrr optimize` measured for it on the same workload and machine.

Reads the doctor reports of `prediction_data_gpu.py` (DIR/reports.tar.gz, made with the
prediction model of their commit) and the optimize rows of a budget-60 run
(`gobrrr_CASE.json` in ROWS, whose measured speedups do not depend on the prediction
model), and writes one table: per workload and remedy, predicted, measured, their ratio
and whether it is within 1.5x; the host's issue time against T_wall beside it.

    python3 benchmarks/prediction_check.py --reports DIR --rows ROWS_DIR --md F [--json F]
"""

from __future__ import annotations

import argparse
import json
import tarfile
from pathlib import Path
from typing import Any

WITHIN = 1.5


def _reports(d: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with tarfile.open(d / "reports.tar.gz") as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m)
            if f is not None and m.name.startswith("doctor_"):
                out[m.name[len("doctor_"):-len(".json")]] = json.load(f)
    return out


def rows(reports_dir: Path, rows_dir: Path) -> list[dict[str, Any]]:
    issue = {r["case"]: r for r in json.loads((reports_dir / "host_issue.json").read_text())}
    out = []
    for case, rep in sorted(_reports(reports_dir).items()):
        f = rows_dir / f"gobrrr_{case}.json"
        if not f.exists():
            continue
        measured = {r["name"]: r["measured_speedup"] for r in json.loads(f.read_text())[
            "remedies"] if r.get("measured_speedup") and r["status"] in (
                "verified", "no significant change", "slower")}
        b = rep.get("budget", {})
        for r in rep.get("remedies", []):
            spec, pred = r.get("spec"), r.get("predicted_speedup")
            if not spec or spec not in measured or not pred:
                continue
            meas = measured[spec]
            ratio = pred / meas
            out.append({"case": case, "remedy": spec, "predicted": pred, "measured": meas,
                        "ratio": ratio, "within": 1 / WITHIN <= ratio <= WITHIN,
                        "host_issue_s": b.get("host_issue_s"), "wall_s": b.get("wall_s"),
                        "host_issue_bench_s": issue.get(case, {}).get("host_issue_s")})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=Path, required=True)
    ap.add_argument("--rows", type=Path, required=True)
    ap.add_argument("--md", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    got = rows(a.reports, a.rows)
    if a.json:
        a.json.write_text(json.dumps(got, indent=1) + "\n")
    n_in = sum(r["within"] for r in got)
    lines = ["# Each remedy's prediction (doctor) against optimize's measurement, H200", "",
             f"{n_in} of {len(got)} within {WITHIN}x.", "",
             "| workload | remedy | predicted | measured | predicted/measured | within "
             f"{WITHIN}x | host issue / T_wall |", "|---|---|---|---|---|---|---|"]
    for r in got:
        share = (f"{r['host_issue_s'] / r['wall_s']:.0%}" if r["host_issue_s"] and r["wall_s"]
                 else "-")
        lines.append(f"| {r['case']} | {r['remedy']} | {r['predicted']:.2f}x | "
                     f"{r['measured']:.2f}x | {r['ratio']:.2f} | "
                     f"{'yes' if r['within'] else 'NO'} | {share} |")
    a.md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Data for issue 24's predictions (item 4), on the H200: for each workload of the
budget-60 table (optimize_models.CASES), what the prediction model needs and does not
have yet, beside the doctor report it predicts from:

- T_wall and the host's issue time of one call: sync, t0, call, t1 (the host is done
  issuing), sync, t2; medians over ROUNDS calls after WARM warm calls. A call the host
  issues in about T_wall is host-bound: a remedy that shortens only the kernels cannot
  make it faster than t1 - t0, which today's additive budget (T - saved) ignores (BERT's
  bf16 cast predicted 6.67x, measured 2.28x);
- `gobrrr doctor TARGET --json` at optimize's diagnosis settings for --budget-s 60
  (plan.diagnose_budget), the report whose per-op budget each prediction comes from.

Reading the two against each remedy's measured speedup in the budget-60 rows
(`session-2026-12-02g/models/gobrrr_*.json`) tests a host-floor model offline:
T_new = max(T - saved, host issue time) for remedies that leave the host's work.

    PYTHONPATH=src python3 benchmarks/prediction_data_gpu.py --out DIR [--cases a,b]

Writes DIR/host_issue.json and DIR/reports.tar.gz (the doctor reports; one file, for the
device's files-per-call limit).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from optimize_models import CASES, DEV, _load  # noqa: E402

WARM = 5
ROUNDS = 30


def issue_times(case_name: str) -> dict[str, Any]:
    import torch

    from gobrrr.timing import device_sync

    sync = device_sync(DEV)
    w = _load(CASES[case_name])
    for _ in range(WARM):
        w()
    sync()
    host, wall = [], []
    for _ in range(ROUNDS):
        sync()
        t0 = time.perf_counter()
        w()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        host.append(t1 - t0)
        wall.append(t2 - t0)
    del w
    if DEV == "cuda":
        torch.cuda.empty_cache()
    h, t = statistics.median(host), statistics.median(wall)
    return {"case": case_name, "host_issue_s": h, "wall_s": t, "host_share": h / t,
            "host_issue_samples_s": host, "wall_samples_s": wall}


def doctor(case_name: str, out: Path) -> float:
    from gobrrr.remedies.plan import diagnose_budget

    time_budget_s, experiments = diagnose_budget(60.0)
    c = CASES[case_name]
    cmd = [sys.executable, "-m", "gobrrr", "doctor", c.target, *c.options, "--device",
           DEV, "--time-budget", f"{time_budget_s:g}", "--json", "-q",
           *([] if experiments else ["--no-experiments"])]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if p.returncode != 0:
        print(f"{case_name}: doctor failed: {p.stderr[-500:]}", file=sys.stderr)
    else:
        (out / f"doctor_{case_name}.json").write_text(p.stdout)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", default="")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in a.cases.split(",") if n] or list(CASES)
    rows = []
    for n in names:
        try:
            row = issue_times(n)
        except Exception as exc:  # a workload that fails is a row with its error
            row = {"case": n, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        row["doctor_s"] = doctor(n, a.out)
        print(f"[{time.strftime('%H:%M:%S')}] {n}: host {row.get('host_issue_s')} s of "
              f"wall {row.get('wall_s')} s; doctor {row['doctor_s']:.0f} s",
              file=sys.stderr, flush=True)
        rows.append(row)
        (a.out / "host_issue.json").write_text(json.dumps(rows, indent=1))
    with tarfile.open(a.out / "reports.tar.gz", "w:gz") as tar:
        for f in sorted(a.out.glob("doctor_*.json")):
            tar.add(f, arcname=f.name)
            os.remove(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

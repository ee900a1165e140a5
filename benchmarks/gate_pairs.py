"""The CI gate on this machine (issue 25, item 5): identical runs must not fail it, and a
real slowdown must. Each round runs three `gobrrr doctor --repeat R` commands of one
target (each times it in R processes), in a shuffled order: OLD and NEW the same code,
SLOW the code with one more pass over its data (benchmarks/gate_targets.py). Then per round:
- OLD vs NEW: a false alarm if the gate fails;
- OLD vs SLOW: caught if the gate fails; and whether time alone (the between-run
  interval, without the work gate) caught it;
- the same pairs with each report's runs_s left out (one run a side, the within-run
  samples: how the gate of compare 1.1 judged them, its interval at --fail-above).

  python benchmarks/gate_pairs.py --rounds 100 --repeat 3 --out F.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gobrrr.compare import compare, ratio_interval

TARGET = str(Path(__file__).resolve().parent / "gate_targets.py") + ":chain"


def doctor(out: Path, repeat: int, extra: bool, budget_s: float) -> dict:
    env = dict(os.environ, GATE_EXTRA_PASS="1" if extra else "0")
    p = subprocess.run([sys.executable, "-m", "gobrrr", "doctor", TARGET, "--device", "cpu",
                        "--no-experiments", "--repeat", str(repeat), "--time-budget",
                        str(budget_s), "--json", "-q"], capture_output=True, text=True,
                       env=env, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    out.write_text(p.stdout)
    return json.loads(p.stdout)


def one_run(d: dict) -> dict:
    """The report as one run: its pooled samples, no runs_s."""
    d = copy.deepcopy(d)
    d["timing"].pop("runs_s", None)
    return d


def old_gate(a: dict, b: dict, fail_above: float) -> bool:
    """compare 1.1's gate: the within-run bootstrap's lower end above the threshold."""
    iv = ratio_interval(a["timing"]["samples_s"], b["timing"]["samples_s"])
    return iv is not None and iv[0] - 1 > fail_above


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--time-budget", type=float, default=0.1)
    p.add_argument("--fail-above", type=float, default=0.05)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rng = random.Random(0)
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            kinds = ["old", "new", "slow"]
            rng.shuffle(kinds)
            got = {k: doctor(Path(tmp) / f"{k}{i}.json", a.repeat, k == "slow",
                             a.time_budget) for k in kinds}
            same = compare(got["old"], got["new"], fail_above=a.fail_above)
            slow = compare(got["old"], got["slow"], fail_above=a.fail_above)
            same1 = compare(one_run(got["old"]), one_run(got["new"]),
                            fail_above=a.fail_above)
            rows.append({
                "order": kinds,
                "old_runs_s": got["old"]["timing"].get("runs_s"),
                "new_runs_s": got["new"]["timing"].get("runs_s"),
                "slow_runs_s": got["slow"]["timing"].get("runs_s"),
                "same_change": same.change, "same_low": same.change_low,
                "same_failed": same.regressed,
                "slow_change": slow.change, "slow_low": slow.change_low,
                "slow_failed": slow.regressed, "slow_time_failed": slow.time_regressed,
                "slow_work": [w.name for w in slow.work_regressed],
                "same_one_run_failed": same1.regressed,
                "same_old_gate_failed": old_gate(got["old"], got["new"], a.fail_above),
                "slow_old_gate_failed": old_gate(got["old"], got["slow"], a.fail_above),
            })
            r = rows[-1]
            print(f"{i + 1}/{a.rounds} ({time.time() - t0:.0f} s): same {r['same_change']:+.3f}"
                  f" fail {r['same_failed']} (old gate {r['same_old_gate_failed']}); slow "
                  f"{r['slow_change']:+.3f} fail {r['slow_failed']} time "
                  f"{r['slow_time_failed']}", flush=True)
            summary = {
                "rounds": len(rows), "repeat": a.repeat, "time_budget_s": a.time_budget,
                "fail_above": a.fail_above, "seconds": time.time() - t0,
                "false_alarms": sum(r["same_failed"] for r in rows),
                "caught": sum(r["slow_failed"] for r in rows),
                "caught_by_time": sum(r["slow_time_failed"] for r in rows),
                "one_run_false_alarms": sum(r["same_one_run_failed"] for r in rows),
                "old_gate_false_alarms": sum(r["same_old_gate_failed"] for r in rows),
                "old_gate_caught": sum(r["slow_old_gate_failed"] for r in rows),
                "slow_change_median": statistics.median(r["slow_change"] for r in rows),
                "load1_at_end": os.getloadavg()[0],
            }
            Path(a.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

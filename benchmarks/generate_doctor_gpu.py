"""`gobrrr doctor hf:NAME --generate N` alone on each LLM row of issue 21's table (no hand
search, no optimize): the diagnosis's own seconds (the report's `diagnose_s`, in-process),
its parts (`generation.seconds_by_part`), the JSON report's bytes and the process's wall
time. For checking the 20 s and 2 MB of the done-when after a change, in a few minutes.

  python benchmarks/generate_doctor_gpu.py --out F.json [--rows tinyllama-1.1b:1,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROWS = "tinyllama-1.1b:1,tinyllama-1.1b:8,qwen2.5-0.5b:1,qwen2.5-0.5b:8,gpt2:1,gpt2:8"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rows", default=ROWS)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--prompt", type=int, default=128)
    a = p.parse_args()
    rows = []
    for spec in a.rows.split(","):
        name, batch = spec.split(":")
        cmd = [sys.executable, "-m", "gobrrr", "doctor", f"hf:{name}", "--generate",
               str(a.new), "--batch-size", batch, "--seq-len", str(a.prompt), "--dtype",
               "bf16", "--device", "cuda", "--json", "-q"]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=400,
                           env=dict(os.environ, NO_COLOR="1"))
        wall = time.perf_counter() - t0
        row: dict = {"workload": name, "batch": int(batch), "doctor_wall_s": wall}
        try:
            d = json.loads(r.stdout)
        except json.JSONDecodeError:
            row["error"] = r.stderr[-800:]
        else:
            g = d.get("generation") or {}
            row |= {"diagnose_s": d.get("diagnose_s"), "report_bytes": len(r.stdout.encode()),
                    "seconds_by_part": g.get("seconds_by_part"),
                    "batch_scaling_stopped": (g.get("batch_scaling") or {}).get("stopped"),
                    "batch_points": len((g.get("batch_scaling") or {}).get("points", [])),
                    "decode_split": (g.get("decode") or {}).get("split"),
                    "regime": d["verdict"]["regime"]}
        rows.append(row)
        print({k: v for k, v in row.items() if k != "decode_split"}, flush=True)
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

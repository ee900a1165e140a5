"""The CUDA-graph remedy's measured time per call against the two ways of predicting it
from the doctor's graph-replay experiment, over every committed optimize row that has
both (CPU; reads `benchmarks/results/**/gobrrr_*.json`):
  scaled    T_wall x replay / eager, the experiment's ratio applied to the diagnosis's
            T_wall (savings.replay before session an)
  replay    the replay's own time per call (savings.replay since session an)
A ratio of 1.00 is a prediction of exactly the time the remedy measured.

    python benchmarks/replay_basis_check.py > benchmarks/results/h100/replay_basis.md
"""

from __future__ import annotations

import glob
import json
import math
import re
import statistics
from pathlib import Path

BASIS = re.compile(r"the graph-replay experiment measured ([\d.]+) (ms|us|s) -> "
                   r"([\d.]+) (ms|us|s) \(([\d.]+)x\): T_wall ([\d.]+) (ms|us|s)")
UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def rows() -> list[tuple[str, float, float, float, float]]:
    """(file, T_wall, experiment's eager, replay, remedy's measured time), seconds."""
    out = []
    root = Path(__file__).resolve().parent / "results"
    for f in sorted(glob.glob(str(root / "**" / "gobrrr_*.json"), recursive=True)):
        for r in json.loads(Path(f).read_text()).get("remedies") or []:
            m = BASIS.search(r.get("prediction_basis") or "")
            if r.get("name") != "cuda_graphs" or not r.get("candidate_s") or not m:
                continue
            out.append((str(Path(f).relative_to(root)), float(m[6]) * UNIT[m[7]],
                        float(m[1]) * UNIT[m[2]], float(m[3]) * UNIT[m[4]],
                        float(r["candidate_s"])))
    return out


def main() -> None:
    got = rows()
    print("# The CUDA-graph prediction's basis against the remedy's measured time\n")
    print("`benchmarks/replay_basis_check.py` over every committed optimize row whose "
          "`cuda_graphs` was measured and predicted from the replay experiment. scaled: "
          "T_wall x replay / eager (savings.replay before session an); replay: the "
          "replay's own time per call (since). 1.00: the time the remedy measured.\n")
    print("| row | T_wall ms | experiment eager ms | replay ms | measured ms | "
          "scaled / measured | replay / measured |")
    print("|---|---|---|---|---|---|---|")
    for f, tw, e, rp, c in got:
        print(f"| {f} | {tw * 1e3:.3f} | {e * 1e3:.3f} | {rp * 1e3:.3f} | {c * 1e3:.3f} | "
              f"{tw * rp / e / c:.2f} | {rp / c:.2f} |")
    print()
    for name, pred in (("scaled", lambda x: x[1] * x[3] / x[2]), ("replay", lambda x: x[3])):
        ratios = [pred(x) / x[4] for x in got]
        within = sum(1 for q in ratios if 1 / 1.2 <= q <= 1.2)
        med = statistics.median(abs(math.log(q)) for q in ratios)
        print(f"- {name}: within 1.2x on {within} of {len(ratios)} rows; median "
              f"|log(predicted / measured)| {med:.3f}")


if __name__ == "__main__":
    main()

"""GPT-2 1x1's spread between processes (issue 24's row; GPU machine, session an).

Session am's H100 measured one fp32 stack, inference mode + torch.compile under
reduce-overhead, at 10.46x in the hand search's process (with TF32 on) and 8.41x in
gobrrr's (783 us a call). This times, in ONE process, against the same eager model:
  hand_fp32   the hand's build (`optimize_models._build`), TF32 off
  hand_tf32   the same with TF32 on around each call (the hand's `tf32` config)
  gobrrr      `optimize_workload(..., only=[inference_mode, compile_reduce_overhead])`,
              gobrrr's own candidate, A/B and verification
and the two hand arms again after gobrrr's search. If hand_fp32 and hand_tf32 agree,
TF32 does not change the batch-1 kernels; if gobrrr agrees with them here, the 24% was
the processes, not the candidate. Writes $OUT/gpt2_1x1_spread.json; one line a timing.

    python benchmarks/gpt2_1x1_spread.py [--rounds 3]   (BENCH_DEVICE=cpu: a smoke test)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=40.0, help="gobrrr's search")
    a = p.parse_args()
    import optimize_models as om
    import torch

    from gobrrr.api import optimize_workload
    from gobrrr.remedies.verify import ab_time
    from gobrrr.timing import device_sync

    sync = device_sync(om.DEV)
    t0 = time.perf_counter()
    case = om.CASES["gpt2_1x1"]
    base = om._load(case)
    base.fn(*base.args, **base.kwargs)

    def eager() -> Any:
        return base.fn(*base.args, **base.kwargs)

    arms: dict[str, Any] = {}
    for name, prec in (("hand_fp32", "fp32"), ("hand_tf32", "tf32")):
        cfg = om.Config(prec, inference_mode=True, compile="reduce-overhead")
        call, ctx = om._build(case, cfg)
        t1 = time.perf_counter()
        with ctx():
            for _ in range(4):
                call()
        sync()
        arms[name] = (call, ctx)
        print(f"[{time.perf_counter() - t0:6.1f}s] {name} built in "
              f"{time.perf_counter() - t1:.1f} s", flush=True)
    rows: list[dict[str, Any]] = []

    def time_arms(phase: str) -> None:
        for r in range(a.rounds):
            for name, (call, ctx) in arms.items():
                ab = ab_time(eager, call, device=om.DEV, budget_s=2.0, b_context=ctx)
                rows.append({"phase": phase, "round": r, "arm": name,
                             "speedup": ab.speedup, "eager_ms": ab.eager_s * 1e3,
                             "candidate_ms": ab.candidate_s * 1e3, "rounds": ab.rounds})
                print(f"[{time.perf_counter() - t0:6.1f}s] {phase} {r} {name:<10} "
                      f"{ab.speedup:6.2f}x  eager {ab.eager_s * 1e3:7.3f} ms  "
                      f"candidate {ab.candidate_s * 1e3:7.3f} ms", flush=True)

    time_arms("before")
    w = om._load(case)  # gobrrr's own copy of the workload, as the CLI would build it
    said: list[str] = []
    res = optimize_workload(w, budget_s=a.budget_s,
                            only=["inference_mode", "compile_reduce_overhead"],
                            progress=said.append)
    gob = [{"name": r.name, "status": r.status, "measured": r.measured_speedup,
            "eager_ms": 1e3 * (r.eager_s or 0.0), "candidate_ms": 1e3 * (r.candidate_s or 0.0)}
           for r in res.remedies]
    for g in gob:
        print(f"[{time.perf_counter() - t0:6.1f}s] gobrrr {g}", flush=True)
    time_arms("after")
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpt2_1x1_spread.json").write_text(json.dumps({
        "gpu": torch.cuda.get_device_name(0) if om.DEV == "cuda" else "cpu",
        "torch": torch.__version__,
        "hand": rows, "gobrrr": gob,
        "gobrrr_best": None if res.best is None else [res.best.name,
                                                      res.best.measured_speedup],
        "gobrrr_progress": said, "seconds": time.perf_counter() - t0}, indent=1))


if __name__ == "__main__":
    main()

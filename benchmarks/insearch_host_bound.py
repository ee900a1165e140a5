"""Why does a host-bound candidate measure low inside optimize's full search? (GPU
machine; issue 24, session q's open question.)

GPT-2 8x512 cast to bf16 (its host ~6 ms a call over a 3.8 ms GPU) measured 2.97-3.35x
over fp32 in a process of its own, 2.80-2.83x as the first candidate of small optimize
runs, and 1.58-2.24x as the first candidate of the full search
(`results/h200/session-2026-12-04q/README.md`). One variant per process (the caller
gives a cold Inductor cache), each an optimize of hf:gpt2 8x512 at --budget-s 60
through `gobrrr.api.optimize_workload`; prints one JSON line: bf16_cast's measured
speedup, the per-call times of both sides of its A/B (which side moved), and whether a
background child ran.

    python benchmarks/insearch_host_bound.py VARIANT [DEVICE]   (cuda; cpu: a dry run)
      full       the full search, as `gobrrr optimize` runs it
      no-child   the full search with no background child (runner.background_cores
                 patched to None: the compile probe gets a child of its own at its turn)
      only       --only bf16_cast
      sleeper    --only bf16_cast beside another process that holds a CUDA context on
                 the same GPU and sleeps (no work): does a second context alone cost?
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

SLEEPER = ("import torch, time; x = torch.ones(2**28, device='cuda'); "
           "torch.cuda.synchronize(); print('ready', flush=True); time.sleep(600)")


def main() -> None:
    variant = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    t_start = time.perf_counter()
    from gobrrr.api import optimize_workload
    from gobrrr.models import ModelOptions
    from gobrrr.remedies import runner
    from gobrrr.targets import load_target

    sleeper = None
    if variant == "sleeper":
        sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE,
                                   text=True)
        assert sleeper.stdout is not None
        sleeper.stdout.readline()  # its context made
    if variant == "no-child":
        runner.background_cores = lambda: None  # type: ignore[assignment]
    w = load_target("hf:gpt2", device, 8, ModelOptions(seq_len=512 if device == "cuda"
                                                        else 64))
    only = ["bf16_cast"] if variant in ("only", "sleeper") else None
    try:
        said: list[str] = []  # the progress lines: where the background child is named
        res = optimize_workload(w, budget_s=60.0, only=only, started_s=t_start,
                                progress=said.append)
    finally:
        if sleeper is not None:
            sleeper.kill()
    rows = {r.name: r for r in res.remedies}
    b = rows.get("bf16_cast")
    print(json.dumps({
        "variant": variant,
        "bf16_cast": None if b is None else {
            "status": b.status, "measured": b.measured_speedup,
            "predicted": b.predicted_speedup, "eager_ms": 1e3 * (b.eager_s or 0.0),
            "candidate_ms": 1e3 * (b.candidate_s or 0.0),
            "rounds": b.checks.get("ab_rounds")},
        "best": None if res.best is None else [res.best.name, res.best.measured_speedup],
        "background_child": any("in a child process in the background" in m
                                for m in said),
        "seconds": time.perf_counter() - t_start}), flush=True)


if __name__ == "__main__":
    main()

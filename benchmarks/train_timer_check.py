"""Why two timers of one training step disagree (issue 23, GPU machine; session s).

In session s's plain-trace run, the GPT-2 training step (4 x 256, AdamW, fp32) measured
46.1 ms a call by a plain loop (`plain_traces_gpu.user_timer`) and 35.1 ms by doctor's
timer seconds later, in one process; doctor has read this step at 35-52 ms across
sittings. This times the step in one process by both timers, in turn, around the things
that ran between them there (a profiled block, an analysis, a doctor run), and with
Python's garbage collector off, so each difference has one cause.

Usage (GPU machine): python3 benchmarks/train_timer_check.py OUT.jsonl
One JSON line per measurement: {"when", "timer", "ms"} (and single calls' spread).
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plain_traces_gpu import build, record, user_timer  # noqa: E402


def main() -> None:
    from gobrrr.timing import measure

    out = open(sys.argv[1], "a")  # noqa: SIM115 - one file for the whole run

    def emit(when: str, timer: str, ms: float, **extra: object) -> None:
        row = {"when": when, "timer": timer, "ms": round(ms, 3), **extra}
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")

    fn, args = build("gpt2_train_4x256")
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()

    def both(when: str) -> None:
        emit(when, "loop", user_timer(fn, args))
        t = measure(lambda: fn(*args), device="cuda", budget_s=1.0)
        emit(when, "gobrrr.measure", t.median_s * 1e3, samples=t.n_samples,
             calls_per_sample=t.calls_per_sample)
        singles = []
        for _ in range(15):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(*args)
            torch.cuda.synchronize()
            singles.append((time.perf_counter() - t0) * 1e3)
        emit(when, "single calls", statistics.median(singles),
             lo=round(min(singles), 2), hi=round(max(singles), 2))

    both("warm, before any profiler")
    both("again")
    gc.disable()
    both("gc disabled")
    gc.enable()
    path = Path(tempfile.mkdtemp()) / "t.json.gz"
    record(fn, args, path)
    both("after a profile() block")
    time.sleep(5)
    both("5 s later")
    from gobrrr.analyze import analyze
    a = analyze([path]).to_dict()
    emit("analyze of the trace", "trace span", a["budget"]["wall_s"] * 1e3)
    both("after analyze")
    import gobrrr
    d = gobrrr.diagnose(fn, *args, time_budget_s=1.0, experiments=False).to_dict()
    emit("doctor", "doctor T_wall", d["timing"]["median_s"] * 1e3)
    both("after doctor")


if __name__ == "__main__":
    main()

"""Does this process's own Inductor compile-worker pool, started by its first compile,
slow the host-bound calls timed right after it? (GPU machine; issue 24.)

On an H100 (session ad, `results/h100/session-2026-12-05ad/`) GPT-2 1x1's
bf16_cast+inference_mode+compile_reduce_overhead read 14.22x in its first A/B timing,
right after the search's process compiled it from the child's caches, and 8.96x timed
again later in the same run. torch's Inductor backend starts a pool of compile workers at
the first compile in a process where Triton is installed (`maybe_warm_pool`: a sidecar
process and get_compile_threads() workers, each importing torch), and may quiesce and
wake it again later. If their start-up takes the host for seconds, eager's host-bound
calls run slower then and every ratio against eager reads high.

This times GPT-2 1x1 eager (fp32, inference: host-bound on a GPU) in 0.5 s windows:
first with no compile in the process, then right after `torch.compile` of a small
pointwise function (compiled cold: its kernel goes through the pool), for `--seconds`;
each window with the count of this process's descendants and the CPU seconds they used
(/proc). `--threads N` sets TORCHINDUCTOR_COMPILE_THREADS (1: no pool) before torch is
imported; `--both` runs the default and `--threads 1` each in a fresh process.

    python benchmarks/pool_spinup.py [--both] [--seconds 20] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WINDOW_S = 0.5


def descendants_cpu() -> tuple[int, float]:
    """(how many processes descend from this one, their user+system CPU seconds)."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parent[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    me, found = os.getpid(), set()
    frontier = {me}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
        found |= frontier
    return len(found), sum(cpu[p] for p in found)


def windows(call: Any, seconds: float) -> list[dict[str, float]]:
    """Per-call medians in WINDOW_S windows for `seconds`, each with the descendants'
    count and the CPU seconds they used in it."""
    out = []
    t0 = time.perf_counter()
    _, cpu_before = descendants_cpu()
    while time.perf_counter() - t0 < seconds:
        start = time.perf_counter()
        times = []
        while time.perf_counter() - start < WINDOW_S:
            a = time.perf_counter()
            call()
            times.append(time.perf_counter() - a)
        n, cpu_now = descendants_cpu()
        out.append({"t_s": round(start - t0, 2),
                    "call_us": round(statistics.median(times) * 1e6, 1),
                    "calls": len(times), "descendants": n,
                    "descendants_cpu_s": round(cpu_now - cpu_before, 2)})
        cpu_before = cpu_now
    return out


def one(seconds: float, device: str) -> dict[str, Any]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).eval().to(device)
    ids = torch.randint(0, 50257, (1, 1), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def call() -> None:
        with torch.inference_mode():
            model(ids)
        sync()

    for _ in range(20):
        call()
    before = windows(call, 3.0)
    f = torch.compile(lambda a: (a.sin() + 1).cos() * 2)
    t = time.perf_counter()
    f(torch.randn(1 << 20, device=device))
    sync()
    compile_s = time.perf_counter() - t
    after = windows(call, seconds)
    base = statistics.median(w["call_us"] for w in before)
    return {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__, "cpus": len(os.sched_getaffinity(0)),
            "compile_threads": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "default"),
            "compile_s": round(compile_s, 2), "before_call_us": base,
            "after": after,
            "after_over_before_first_5s": round(statistics.median(
                w["call_us"] for w in after if w["t_s"] < 5.0) / base, 3),
            "after_over_before_last_5s": round(statistics.median(
                w["call_us"] for w in after if w["t_s"] >= seconds - 5.0) / base, 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--both", action="store_true")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", type=Path, default=None)
    o = ap.parse_args()
    if o.both:  # each in a fresh process, its own cold Inductor cache
        rows = []
        for threads in (None, 1):
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp())
            cmd = [sys.executable, __file__, "--seconds", str(o.seconds)]
            cmd += ["--threads", str(threads)] if threads else []
            cmd += ["--device", o.device] if o.device else []
            got = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            rows.append(json.loads(got.stdout.strip().splitlines()[-1]))
            print(got.stdout.strip().splitlines()[-1], flush=True)
        if o.out:
            o.out.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    if o.threads is not None:
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(o.threads)
    import torch

    device = o.device or ("cuda" if torch.cuda.is_available() else "cpu")
    row = one(o.seconds, device)
    print(json.dumps(row), flush=True)
    if o.out:
        o.out.write_text(json.dumps(row, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

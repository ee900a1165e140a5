"""Does the profiler's own host cost per recorded op explain why `gobrrr analyze` of a plain
trace reads more GPU idle than unprofiled `gobrrr doctor`? (issue 23; the write-up:
benchmarks/results/h200/plain-traces-profiler-cost.md)

    python benchmarks/profiler_cost.py cpu                    # per-event cost, this CPU
    python benchmarks/profiler_cost.py cuda                   # the same with CUDA activity,
                                     # and GPT-2 8x512's host issue time bare and profiled
    python benchmarks/profiler_cost.py compiled               # the same for compiled calls
                                     # (Triton launches through the driver) against eager
    python benchmarks/profiler_cost.py replay TRACE.json.gz…  # what a per-op cost would cut
    python benchmarks/profiler_cost.py ops TRACE.json.gz…     # median host time per op name

`cpu`: tiny ops in a loop, timed without a profiler, under `profile(activities=[CPU])` and
under `profile(activities=[CPU], record_shapes=True)` (the loop only, not the profiler's
start and export); the extra time per call divided by the events recorded per call.

`replay`: each trace's steps as analyze finds them (tracefile/stepfind.py), replayed with
every recorded cpu_op made C us cheaper on the host: host times move earlier by C per
cpu_op begun (all threads in time order: autograd's thread runs while the main one
waits in backward); a kernel starts at max(its launch, moved, + the launch latency (the
10th percentile of launch-to-start of the kernels that did not queue), the end of the
kernel before it on its stream); a stream or device synchronize waits for the replayed
device. Printed: the time per step for several C (C=0 is the replay of the trace as it
ran; compare ratios, not absolute times: device-bound steps finish after the window).
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOST = ("cpu_op", "cuda_runtime", "cuda_driver", "user_annotation")
DEVICE = ("kernel", "gpu_memset", "gpu_memcpy")
LAUNCH = ("cuda_runtime", "cuda_driver")
SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
COSTS_US = (0.0, 0.7, 1.5, 2.5, 4.0, 6.0, 8.0)


def cpu(n: int = 5000, reps: int = 7) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    x, w, v = torch.ones(4), torch.ones(8, 8), torch.ones(2, 8)
    ops: dict[str, Callable[[], Any]] = {
        "add(x, 1.0)": lambda: torch.add(x, 1.0),
        "view": lambda: x.view(2, 2),
        "empty": lambda: torch.empty(4),
        "linear 2x8x8": lambda: torch.nn.functional.linear(v, w),
    }

    def run(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n

    for name, fn in ops.items():
        run(fn)
        times: dict[str, list[float]] = {"plain": [], "cpu": [], "shapes": []}
        events = 0.0
        for _ in range(reps):
            times["plain"].append(run(fn))
            with profile(activities=[ProfilerActivity.CPU]):
                times["cpu"].append(run(fn))
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                times["shapes"].append(run(fn))
            events = len(prof.events()) / n
        m = {k: statistics.median(t) * 1e6 for k, t in times.items()}
        print(f"{name:13s} {events:.0f} event(s)/call  plain {m['plain']:.2f} us  "
              f"+profile {m['cpu'] - m['plain']:.2f}  +record_shapes "
              f"{m['shapes'] - m['plain']:.2f} us/call  = "
              f"{(m['shapes'] - m['plain']) / events:.2f} us per recorded event")


def cuda(n: int = 2000, reps: int = 7) -> None:
    """`cpu`'s per-event cost with CUDA tensors and CUDA activity recorded (CUPTI's
    callbacks on every runtime call), then GPT-2 8x512's (eager, no_grad) host issue
    time per call bare and under `profile(activities=[CPU, CUDA], record_shapes=True)`,
    twice each in one process: the GPU is held busy before each call (gobrrr's
    cuda_hold) so the host never waits for it, and the call's return is its issue time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gobrrr.host_issue import cuda_hold

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    x, w, v = (torch.ones(4, device="cuda"), torch.ones(8, 8, device="cuda"),
               torch.ones(2, 8, device="cuda"))
    ops: dict[str, Callable[[], Any]] = {
        "add(x, 1.0)": lambda: torch.add(x, 1.0),
        "view": lambda: x.view(2, 2),
        "linear 2x8x8": lambda: torch.nn.functional.linear(v, w),
    }

    def run(fn: Callable[[], Any]) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()
        return dt

    for name, fn in ops.items():
        run(fn)
        times: dict[str, list[float]] = {"plain": [], "cuda": [], "shapes": []}
        events = 0.0
        for _ in range(reps):
            times["plain"].append(run(fn))
            with profile(activities=acts):
                times["cuda"].append(run(fn))
            with profile(activities=acts, record_shapes=True) as prof:
                times["shapes"].append(run(fn))
            events = len([e for e in prof.events() if e.device_type.name == "CPU"]) / n
        m = {k: statistics.median(t) * 1e6 for k, t in times.items()}
        print(f"cuda {name:13s} {events:.0f} host event(s)/call  plain {m['plain']:.2f} us"
              f"  +profile {m['cuda'] - m['plain']:.2f}  +record_shapes "
              f"{m['shapes'] - m['plain']:.2f} us/call  = "
              f"{(m['shapes'] - m['plain']) / max(events, 1):.2f} us per host event",
              flush=True)

    from gobrrr.models import ModelOptions
    from gobrrr.targets import load_target

    wl = load_target("hf:gpt2", "cuda", 8, ModelOptions(seq_len=512))
    hold = cuda_hold()
    assert hold is not None

    def issue(calls: int = 8) -> list[float]:
        out = []
        with torch.no_grad():
            for _ in range(calls):
                torch.cuda.synchronize()
                hold(0.2)  # 200 ms of GPU work queued first: the host never waits
                t0 = time.perf_counter()
                wl.fn(*wl.args, **wl.kwargs)
                out.append(time.perf_counter() - t0)
                torch.cuda.synchronize()
        return out

    issue(3)
    for label in ("bare", "profiled", "bare", "profiled"):
        if label == "bare":
            got = issue()
        else:
            with profile(activities=acts, record_shapes=True) as prof:
                got = issue()
            n_ops = sum(1 for e in prof.events() if e.device_type.name == "CPU")
        ms = sorted(g * 1e3 for g in got)
        extra = f", {n_ops / len(got):.0f} host events/call" if label == "profiled" else ""
        print(f"gpt2 8x512 {label}: host issue median {statistics.median(ms):.2f} ms "
              f"(min {ms[0]:.2f}, max {ms[-1]:.2f}){extra}", flush=True)


def compiled(n: int = 1000, reps: int = 5) -> None:
    """Host time per call of tiny CUDA functions (the GPU far ahead of nothing: each
    kernel ~2 us, the call host-bound), bare against `profile(activities=[CPU, CUDA],
    record_shapes=True)`: compiled calls (one Triton kernel launched through the driver
    API, `cuLaunchKernel*`; `four` was meant as four kernels, and Inductor fused its
    chain of reductions into one on the H200) and the same functions eager; the host
    events of each kind recorded per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    x = torch.randn(4096, device="cuda")

    def four(x: Any) -> Any:  # four reductions in a chain: four kernels
        a = x.sum()
        b = (x - a).abs().amax()
        c = (x * b).sum()
        return (x + c).square().mean()

    one_c = torch.compile(lambda x: (x * 2 + 1).relu())
    four_c = torch.compile(four)
    fns: dict[str, Callable[[], Any]] = {
        "compiled, 1 kernel": lambda: one_c(x),
        "compiled four": lambda: four_c(x),
        "eager, 1 kernel": lambda: torch.add(x, 1.0),
        "eager four": lambda: four(x),
    }

    def run(fn: Callable[[], Any]) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    for name, fn in fns.items():
        for _ in range(5):
            fn()
        bare, prof_t = [], []
        counts: dict[str, float] = {}
        for _ in range(reps):
            bare.append(run(fn))
            with profile(activities=acts, record_shapes=True) as prof:
                prof_t.append(run(fn))
        kinds: dict[str, int] = defaultdict(int)
        for e in prof.events():
            if e.device_type.name != "CPU":
                continue
            kind = ("driver launch" if e.name.startswith("cuLaunch") else
                    "runtime" if e.name.startswith("cuda") else
                    "aten" if e.name.startswith("aten::") else "range")
            kinds[kind] += 1
        counts = {k: v / n for k, v in sorted(kinds.items())}
        b, p = statistics.median(bare) * 1e6, statistics.median(prof_t) * 1e6
        print(f"{name:20s} bare {b:7.2f} us/call  profiled {p:7.2f}  (+{p - b:.2f})  "
              f"host events/call {counts}", flush=True)


def _load(path: Path) -> dict[str, Any]:
    from gobrrr.tracefile.columns import stream_trace
    from gobrrr.tracefile.stepfind import find_steps

    cols = find_steps(stream_trace(path))
    t0 = cols.steps[0][1]
    t1 = cols.steps[-1][1] + cols.steps[-1][2]
    ev = json.loads(gzip.open(path).read())["traceEvents"]
    xs = [e for e in ev if e.get("ph") == "X"]
    dev: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in xs:
        if e.get("cat") in DEVICE:
            dev[e["args"].get("correlation")].append(e)
    # device work launched before the steps (a warm-up's queued kernels) ends as it did
    pre: dict[Any, float] = {}
    for e in xs:
        if e.get("cat") in LAUNCH and e["ts"] < t0:
            for k in dev.get(e["args"].get("correlation"), []):
                s = k["args"].get("stream")
                pre[s] = max(pre.get(s, t0), k["ts"] + k["dur"])
    host = sorted((e for e in xs if e.get("cat") in HOST and t0 <= e["ts"] < t1),
                  key=lambda e: e["ts"])
    return {"steps": len(cols.steps), "t0": t0, "t1": t1, "host": host, "dev": dev,
            "pre": pre}


def _kernels(t: dict[str, Any], e: dict[str, Any]) -> list[dict[str, Any]]:
    if e.get("cat") not in LAUNCH:
        return []
    return list(t["dev"].get(e["args"].get("correlation"), []))


def replay(t: dict[str, Any], cost_us: float) -> float:
    """The replayed time per step (module docstring)."""
    lats, ends = [], {}
    for e in t["host"]:
        for k in _kernels(t, e):
            s = k["args"].get("stream")
            if k["ts"] - ends.get(s, -1e30) > 2:
                lats.append(k["ts"] - e["ts"])
            ends[s] = k["ts"] + k["dur"]
    lats.sort()
    lat = lats[len(lats) // 10] if lats else 5.0
    shift, dend = 0.0, dict(t["pre"])
    for e in t["host"]:
        if e.get("cat") in LAUNCH and e["name"] in SYNC:
            end = max(e["ts"] - shift + 1.0, max(dend.values(), default=t["t0"]))
            shift = e["ts"] + e["dur"] - end
            continue
        for k in _kernels(t, e):
            s = k["args"].get("stream")
            start = max(e["ts"] - shift + lat, dend.get(s, t["t0"]))
            dend[s] = start + k["dur"]
        if e.get("cat") == "cpu_op":
            shift += cost_us
    end = max(t["t1"] - shift, max(dend.values(), default=t["t0"]))
    return float((end - t["t0"]) / t["steps"])


def ops(path: Path) -> None:
    ev = json.loads(gzip.open(path).read())["traceEvents"]
    by: dict[str, list[float]] = defaultdict(list)
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime"):
            by[e["name"]].append(e["dur"])
    names = ("aten::as_strided", "aten::view", "aten::empty", "aten::transpose",
             "aten::mul", "aten::add", "aten::layer_norm", "aten::addmm",
             "cudaLaunchKernel", "cudaLaunchKernelExC")
    print(path.name, "  ".join(f"{n.split('::')[-1]} {statistics.median(by[n]):.1f}"
                               for n in names if by.get(n)))


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("cpu", "cuda", "compiled", "replay", "ops"):
        raise SystemExit(__doc__)
    if argv[0] in ("cpu", "cuda", "compiled"):
        {"cpu": cpu, "cuda": cuda, "compiled": compiled}[argv[0]]()
        return
    for p in map(Path, argv[1:]):
        if argv[0] == "ops":
            ops(p)
            continue
        t = _load(p)
        n_ops = sum(e.get("cat") == "cpu_op" for e in t["host"]) / t["steps"]
        base = replay(t, 0.0)
        row = "  ".join(f"{c:g}: {replay(t, c) / 1e3:.2f} ({replay(t, c) / base:.3f})"
                        for c in COSTS_US)
        print(f"{p.name}: {t['steps']} steps, {n_ops:.0f} cpu_op/step; ms per step "
              f"(x the C=0 replay) for C us per cpu_op: {row}")


if __name__ == "__main__":
    main(sys.argv[1:])

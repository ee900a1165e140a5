"""A separate profiled run, for what only a trace shows: which kernels ran, when, and for
how long. Never used for timing (the profiler inflates the CPU-side overhead it records).
Kernel intervals come from the exported Chrome trace, whose format ("cat": "kernel",
"ts"/"dur" in us) has been stable across torch versions."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from gobrrr.intervals import total_us

__all__ = ["idle_fraction", "kernel_intervals_us", "profile_op_times_us"]

_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def idle_fraction(intervals: Sequence[tuple[float, float]]) -> float:
    """Share of the span from the first kernel's start to the last kernel's end in which
    no kernel ran: what nvidia-smi's "utilization" misses when it reads 100%."""
    if not intervals:
        raise ValueError("no kernel intervals")
    span = max(e for _, e in intervals) - min(s for s, _ in intervals)
    return 0.0 if span <= 0 else 1.0 - total_us(intervals) / span


def kernel_intervals_us(fn: Callable[[], Any], repeats: int = 1) -> list[tuple[float, float]]:
    """(start, end) in us of every device kernel/memcpy/memset `fn` runs, `repeats` times."""
    trace = _chrome_trace(fn, repeats, cuda=True)
    return [(float(e["ts"]), float(e["ts"]) + float(e["dur"]))
            for e in trace.get("traceEvents", [])
            if e.get("cat") in _DEVICE_CATS and "dur" in e]


def profile_op_times_us(fn: Callable[[], Any], cuda: bool, repeats: int = 3) -> dict[str, float]:
    """Per aten op name: self time in us summed over `repeats` calls: device (kernel)
    time on CUDA, CPU time on CPU. Kernels count toward the innermost op that launched
    them, so composite wrappers (aten::linear) get 0 and aten::addmm gets the GEMM."""
    prof = _profiled(fn, repeats, cuda)
    out: dict[str, float] = {}
    for ev in prof.key_averages():
        if cuda:
            t = getattr(ev, "self_device_time_total", None)
            if t is None:  # torch < 2.4 named it after CUDA
                t = getattr(ev, "self_cuda_time_total", 0.0)
        else:
            t = ev.self_cpu_time_total
        if t:
            out[ev.key] = out.get(ev.key, 0.0) + float(t)
    return out


def _profiled(fn: Callable[[], Any], repeats: int, cuda: bool) -> Any:
    """The finished profiler of `repeats` calls of `fn` (device work synchronized)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(repeats):
            fn()
        if cuda:
            torch.cuda.synchronize()
    return prof


def _chrome_trace(fn: Callable[[], Any], repeats: int, cuda: bool) -> dict[str, Any]:
    prof = _profiled(fn, repeats, cuda)
    fd, path = tempfile.mkstemp(suffix=".json", prefix="gobrrr-trace-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            return json.load(fh)
    finally:
        os.unlink(path)

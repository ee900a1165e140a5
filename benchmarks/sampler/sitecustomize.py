"""A stack sampler for gobrrr's processes on the GPU machine (issue 24: where does the
training step's background compile spend its 35-45 s?). Put this folder first on
PYTHONPATH with GOBRRR_SAMPLE_DIR set: every Python process started with gobrrr's
optimize CLI, its compile child (`compile_child_main`) or a benchmark script named in
GOBRRR_SAMPLE_ARGV samples its main thread's stack every SAMPLE_S and writes, every
WRITE_S (a child is stopped with SIGKILL: nothing at exit would be written),
`ROLE-PID.json`: the counts of each stack's subsystem path and innermost frames, a
timeline of the path at every 10th sample, and the machine's CPU use each second
(/proc/stat). Sampling from a thread costs the sampled thread the GIL for a moment
every 20 ms: a few percent, said beside the figures. Not part of gobrrr.

It is not a neutral observer of tensor lifetimes: a frame object it holds keeps that
frame's locals (tensors) alive after the function returned. Until session v's fourth
call it held the last frame it read across its 20 ms sleep; in the calls sampled so,
the training step's compiled candidate failed CUDA graph trees' liveness check ("graph
recording observed an input tensor deallocate during graph recording that did not occur
during replay") in 4 of 6 measured tries, and in none of 2 unsampled
(`results/h200/session-2026-12-04v/README.md`). It now lets go of the frames before it
sleeps; while it walks them (about a millisecond) the effect remains possible.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import sys
import threading
import time
from collections import Counter

SAMPLE_S = 0.02
WRITE_S = 2.0

# (substring of a frame's file name, tag), first match wins
TAGS = (
    ("importlib._bootstrap", "import"),
    ("/torch/_inductor/cudagraph", "cudagraphs"),
    ("/torch/_inductor/async_compile", "async_compile"),
    ("/torch/_inductor/compile_worker", "compile_worker"),
    ("/torch/_inductor/runtime/", "inductor_runtime"),
    ("/torch/_inductor/codecache", "codecache"),
    ("/torch/_inductor/", "inductor"),
    ("/torch/_functorch/", "aot"),
    ("/torch/_dynamo/", "dynamo"),
    ("/torch/_subclasses/", "fake"),
    ("/torch/fx/", "fx"),
    ("/torch/optim/", "optim"),
    ("/torch/autograd/", "autograd"),
    ("/triton/", "triton"),
    ("/transformers/", "transformers"),
    ("concurrent/futures", "futures"),
    ("/gobrrr/", None),  # tagged by module below
)


def _tag(filename: str) -> str | None:
    for key, tag in TAGS:
        if key in filename:
            if tag is None:
                return "gobrrr." + filename.split("/gobrrr/", 1)[1].removesuffix(".py") \
                    .replace("/", ".")
            return tag
    return None


def _role() -> str | None:
    argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    if "compile_child_main" in argv:
        return "child"
    if "compile_worker" in argv or "multiprocessing" in argv:
        return None
    extra = os.environ.get("GOBRRR_SAMPLE_ARGV")
    if extra and extra in argv:
        return "bench"
    if "gobrrr" in argv and "optimize" in argv:
        return "parent"
    return None


def _cpu() -> tuple[int, int]:
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


_STOP = threading.Event()


def _run(role: str, out: str, main_ident: int) -> None:
    t0 = time.perf_counter()
    paths: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    deep: Counter[str] = Counter()  # whole stacks of samples matching DEEP
    deep_key = os.environ.get("GOBRRR_SAMPLE_DEEP", "_tensor_str")
    timeline: list[tuple[float, str]] = []
    cpu: list[tuple[float, float]] = []
    last_cpu = _cpu()
    last_write = last_cpu_t = t0
    n = 0
    path_file = os.path.join(out, f"{role}-{os.getpid()}.json")
    while not _STOP.is_set():
        time.sleep(SAMPLE_S)
        now = time.perf_counter()
        frame = sys._current_frames().get(main_ident)
        if frame is None:
            return
        tags: list[str] = []
        frames: list[str] = []
        f = frame
        while f is not None:
            name = f.f_code.co_filename
            if len(frames) < 40:
                frames.append(f"{os.path.basename(name)}:{f.f_code.co_name}:{f.f_lineno}")
            t = _tag(name)
            if t is not None and (not tags or tags[-1] != t):
                tags.append(t)
            f = f.f_back
        # a frame held here keeps its locals alive after its function returned: never
        # across the sleep (module docstring)
        del frame, f
        path = ">".join(reversed(tags)) or "-"
        paths[path] += 1
        inner[" < ".join(frames[:4])] += 1
        if any(deep_key in x for x in frames[:8]):
            deep[" < ".join(frames)] += 1
        n += 1
        if n % 10 == 0:
            timeline.append((round(now - t0, 2), path))
        if now - last_cpu_t >= 1.0:
            c = _cpu()
            busy = (c[0] - last_cpu[0]) / max(1, c[1] - last_cpu[1])
            cpu.append((round(now - t0, 1), round(busy, 3)))
            last_cpu, last_cpu_t = c, now
        if now - last_write >= WRITE_S:
            last_write = now
            doc = {"role": role, "pid": os.getpid(), "argv": sys.argv[:3],
                   "sample_s": SAMPLE_S, "samples": n, "elapsed_s": round(now - t0, 2),
                   "paths": paths.most_common(60), "inner": inner.most_common(60),
                   "deep": deep.most_common(20),
                   "timeline": timeline, "cpu_busy": cpu,
                   "affinity": sorted(os.sched_getaffinity(0))}
            tmp = path_file + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(doc, fh)
            os.replace(tmp, path_file)


def _start() -> None:
    out = os.environ.get("GOBRRR_SAMPLE_DIR")
    role = _role() if out else None
    if not role or not out:
        return
    os.makedirs(out, exist_ok=True)
    th = threading.Thread(target=_run, args=(role, out, threading.main_thread().ident),
                          daemon=True, name="gobrrr-sampler")
    th.start()

    def stop() -> None:  # sampling on while the interpreter finalizes aborted it
        _STOP.set()
        th.join(timeout=1.0)

    atexit.register(stop)


def _chain() -> None:
    """Load the sitecustomize this one shadows, if the interpreter has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    from importlib.machinery import PathFinder

    other = PathFinder.find_spec("sitecustomize", path)
    if other is not None and other.loader is not None:
        mod = importlib.util.module_from_spec(other)
        other.loader.exec_module(mod)


_start()
_chain()

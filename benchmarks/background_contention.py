"""Does optimize's background compile child slow the candidates timed beside it? (GPU
machine; issue 24's precision predictions.)

On the H200 budget-60 rows, bf16 in eager measured 0.49-0.66x of its prediction on five
models while bf16 under a CUDA graph (no host work left) measured 0.88-0.94x; those eager
candidates are host-bound after the cast (GPT-2 8x512: GPU 6.4 ms, host issue 9.0 ms a
call), and they were timed while the background child compiled on the other cores.
This times GPT-2 8x512 (inference) in fp32 and cast to bf16, single calls (sync, call,
sync: what the A/B timer and doctor time on CUDA), interleaved, median of N each, and
gobrrr's own A/B ratio, under:
  alone      nothing else running;
  child      gobrrr's real background child (start_child on background_cores(), nice
             10) compiling bf16_cast + inference_mode + compile_reduce_overhead +
             freezing of the same target, timed while it compiles;
  hog        busy Python loops on background_cores(), nice 10 (no GPU, no Inductor);
  hog-apart  the same on the background cores that share no physical core with the
             search's cores (thread_siblings_list), if any differ.
`--after-diagnose` instead times: alone; after `gobrrr.diagnose` of the fp32 call in this
process (what optimize does before its search: profiling, experiments, MemTracker),
with the global module hooks and Python's GC counts printed; then with GC off.
Prints the CPU topology and one JSON line per condition.

    python benchmarks/background_contention.py [--calls 30] [--out F]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any


def _spin(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x += 1


def _siblings(cpu: int) -> set[int]:
    text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _hog(cores: list[int], seconds: float) -> list[mp.Process]:
    procs = []
    stop_at = time.time() + seconds
    for c in cores:
        p = mp.Process(target=_spin, args=(stop_at,), daemon=True)
        p.start()
        os.sched_setaffinity(p.pid, [c])
        os.setpriority(os.PRIO_PROCESS, p.pid, 10)
        procs.append(p)
    return procs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--after-diagnose", action="store_true")
    a = ap.parse_args()
    print(subprocess.run(["lscpu", "-e=CPU,CORE,SOCKET,NODE"], capture_output=True,
                         text=True).stdout)
    import copy

    import torch

    from gobrrr.models import ModelOptions
    from gobrrr.remedies.compile_child import background_cores, reload_spec, start_child
    from gobrrr.remedies.verify import ab_time
    from gobrrr.targets import load_target

    opts = ModelOptions(seq_len=512)
    w = load_target("hf:gpt2", "cuda", 8, opts)
    model = next(c.cell_contents for c in w.fn.__closure__ or ()
                 if isinstance(c.cell_contents, torch.nn.Module))
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    ids = w.args[0]

    def fp32_call() -> Any:
        with torch.inference_mode():
            return model(ids)

    def bf16_call() -> Any:
        with torch.inference_mode():
            return bf16(ids)

    for f in (fp32_call, bf16_call):
        for _ in range(3):
            f()
    torch.cuda.synchronize()

    def single(f: Any) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def issue(f: Any) -> float:
        """The host's time for one call with the GPU idle at its start (no sync inside
        the timing; HF GPT-2 may wait on the GPU inside its forward)."""
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        f()
        t = time.perf_counter() - t0
        torch.cuda.synchronize()
        return t

    def measure(label: str, extra: dict[str, Any]) -> dict[str, Any]:
        t32, t16, i16 = [], [], []
        for _ in range(a.calls):
            t32.append(single(fp32_call))
            t16.append(single(bf16_call))
            i16.append(issue(bf16_call))
        ab = ab_time(fp32_call, bf16_call, device="cuda", budget_s=1.5)
        row = {"condition": label, "fp32_ms": 1e3 * statistics.median(t32),
               "bf16_ms": 1e3 * statistics.median(t16),
               "bf16_host_ms": 1e3 * statistics.median(i16),
               "ratio_single": statistics.median(t32) / statistics.median(t16),
               "ab_speedup": ab.speedup, "ab_rounds": ab.rounds} | extra
        print(json.dumps(row), flush=True)
        return row

    rows = [measure("alone", {})]
    if a.after_diagnose:
        import gc

        from torch.nn.modules import module as mod

        import gobrrr

        def hooks() -> dict[str, int]:
            return {k: len(getattr(mod, k)) for k in dir(mod)
                    if k.startswith("_global_") and isinstance(getattr(mod, k), dict)}

        before = hooks()
        t0 = time.perf_counter()
        gobrrr.diagnose(w.fn, *w.args)
        took = time.perf_counter() - t0
        after = hooks()
        rows.append(measure("after-diagnose", {
            "diagnose_s": took, "hooks_before": before, "hooks_after": after,
            "gc_objects": len(gc.get_objects()),
            "profiler_enabled": torch.autograd.profiler._is_profiler_enabled}))
        gc.collect()
        gc.disable()
        rows.append(measure("after-diagnose-gc-off", {}))
        gc.enable()
        if a.out is not None:
            a.out.write_text(json.dumps(rows, indent=1))
        return
    bg = background_cores() or []
    mine = sorted(os.sched_getaffinity(0))
    search_cores = [c for c in mine if c not in bg]
    shared = sorted({s for c in search_cores for s in _siblings(c)} - set(search_cores))
    print(f"search cores {search_cores}, background {bg}, background cores sharing a "
          f"physical core with the search's: {shared}", flush=True)
    spec = reload_spec("hf:gpt2", "cuda", 8, opts)
    child = start_child(spec, ["bf16_cast", "inference_mode", "compile_reduce_overhead",
                               "freezing"], bg)
    time.sleep(12.0)  # its imports and build: the compile is under way after this
    rows.append(measure("child", {"child_elapsed_s": child.elapsed_s(),
                                  "child_running": child.proc.poll() is None}))
    child.stop()
    procs = _hog(bg, 20.0)
    time.sleep(1.0)
    rows.append(measure("hog", {"cores": bg}))
    for p in procs:
        p.terminate()
    apart = [c for c in bg if c not in shared]
    if shared and apart:
        procs = _hog(apart, 20.0)
        time.sleep(1.0)
        rows.append(measure("hog-apart", {"cores": apart}))
        for p in procs:
            p.terminate()
    if a.out is not None:
        a.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

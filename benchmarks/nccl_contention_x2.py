"""Issue 27: does NCCL slow a DDP step's compute kernels? (nvidia-h200-x2, under torchrun)

On two H200s (run 4) resnet50_ddp's exposed communication read 3.8% / 0.7% of the step
against a no_sync bound of 18.1% / 17.0%: 13-15 points that the bucket copies do not
explain. The report's explanation, compute kernels slowed by sharing SMs and memory
bandwidth with NCCL, was a hypothesis. This measures it directly: the same trainer's
step profiled with DDP's gradient all-reduce (sync) and under `model.no_sync()`, each
kernel name's count and total duration per step in both. A kernel that runs in both
with the same count per step is the same work; its extra time in the sync step is what
running beside NCCL cost it. Kernels only in the sync step are NCCL's and DDP's bucket
copies. The unprofiled steps (sync and no_sync interleaved, medians) give the bound.

    torchrun --standalone --nproc-per-node 2 benchmarks/nccl_contention_x2.py OUT \
        [--target resnet50_ddp|gpt2_ddp] [--batch N] [--steps K] [--device cuda|cpu]

Each rank writes OUT/contention-rankN.json; rank 0 prints the summary. On CPU (gloo) it
runs end to end for its plumbing; gloo has no kernels to compare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plain_ranks import step_s as _timed  # noqa: E402  (benchmarks/ on the path first)
from plain_ranks import sync as _sync  # noqa: E402


def _kernels(step: Any, args: tuple, ctx: Any, device: str, k: int) -> dict[str, list]:
    """Kernel name -> [count per step, microseconds per step] over k profiled steps."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(k):
            with ctx():
                step(*args)
        _sync(device)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    out: dict[str, list] = {}
    for e in events:
        if e.get("cat") == "kernel":
            row = out.setdefault(e["name"], [0.0, 0.0])
            row[0] += 1 / k
            row[1] += float(e.get("dur", 0.0)) / k
    return out


def compare(sync: dict[str, list], nosync: dict[str, list]) -> dict[str, Any]:
    """The same work in both (a name with the same count per step) against its time, and
    what only the sync step runs."""
    same = {n: (sync[n], nosync[n]) for n in sync
            if n in nosync and abs(sync[n][0] - nosync[n][0]) < 1e-6}
    same_sync_us = sum(s[1] for s, _ in same.values())
    same_nosync_us = sum(ns[1] for _, ns in same.values())
    only = {n: v for n, v in sync.items() if n not in same}
    nccl_us = sum(v[1] for n, v in only.items() if "nccl" in n.lower())
    worst = sorted(same.items(), key=lambda kv: kv[1][1][1] - kv[1][0][1])[:8]
    return {"same_kernels": len(same), "same_sync_us": same_sync_us,
            "same_nosync_us": same_nosync_us, "excess_us": same_sync_us - same_nosync_us,
            "only_sync_nccl_us": nccl_us,
            "only_sync_other_us": sum(v[1] for v in only.values()) - nccl_us,
            "only_nosync_us": sum(v[1] for n, v in nosync.items() if n not in same),
            "slowed_most": [{"kernel": n[:120], "count": s[0], "sync_us": s[1],
                             "no_sync_us": ns[1]} for n, (s, ns) in worst]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--target", default="resnet50_ddp")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--device", default="cuda")
    o = ap.parse_args()
    import dist_targets
    import torch.distributed as dist

    dist.init_process_group("nccl" if o.device == "cuda" else "gloo")
    rank = dist.get_rank()
    if o.device == "cuda":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    step, args = getattr(dist_targets, o.target)(o.batch, o.device)
    model = dist_targets.TRAINERS[-1].model

    def nothing() -> Any:
        return contextlib.nullcontext()

    ctxs = {"sync": nothing, "no_sync": model.no_sync}
    for _ in range(3):  # warm-up: cuDNN's choices, DDP's bucket rebuild, the allocator
        for c in ctxs.values():
            _timed(step, args, c, o.device, 1)
    walls: dict[str, list[float]] = {k: [] for k in ctxs}
    for _ in range(o.rounds):  # interleaved, so drift falls on both alike
        for name, c in ctxs.items():
            dist.barrier()
            walls[name].append(_timed(step, args, c, o.device, o.steps))
    kernels = {}
    for name, c in ctxs.items():
        dist.barrier()
        kernels[name] = _kernels(step, args, c, o.device, o.steps)
    sync_s, nosync_s = (statistics.median(walls[k]) for k in ("sync", "no_sync"))
    row = {"rank": rank, "target": o.target, "batch": o.batch, "device": o.device,
           "sync_ms": sync_s * 1e3, "no_sync_ms": nosync_s * 1e3,
           "bound_fraction": max(0.0, sync_s - nosync_s) / sync_s,
           "walls_ms": {k: [w * 1e3 for w in v] for k, v in walls.items()},
           "compare": compare(kernels["sync"], kernels["no_sync"]), "kernels": kernels}
    o.out.mkdir(parents=True, exist_ok=True)
    (o.out / f"contention-rank{rank}.json").write_text(json.dumps(row, indent=1))
    rows: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(rows, {k: v for k, v in row.items() if k != "kernels"})
    if rank == 0:
        for r in rows:
            c = r["compare"]
            print(f"rank {r['rank']}: step {r['sync_ms']:.2f} ms, no_sync "
                  f"{r['no_sync_ms']:.2f} ms (bound {r['bound_fraction']:.1%}); the same "
                  f"{c['same_kernels']} kernels {c['same_nosync_us'] / 1e3:.2f} -> "
                  f"{c['same_sync_us'] / 1e3:.2f} ms beside NCCL (excess "
                  f"{c['excess_us'] / 1e3:.2f} ms, {c['excess_us'] / 1e3 / r['sync_ms']:.1%}"
                  f" of the step); NCCL {c['only_sync_nccl_us'] / 1e3:.2f} ms, other "
                  f"sync-only kernels {c['only_sync_other_us'] / 1e3:.2f} ms")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

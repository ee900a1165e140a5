"""FSDP2's host work per step, measured at the world size it runs at (issue 27, item 2:
the FSDP2 projection starts from a step that keeps it).

    torchrun --standalone --nproc-per-node 1 benchmarks/fsdp_host_work.py OUT.json
    torchrun --standalone --nproc-per-node 2 benchmarks/fsdp_host_work.py OUT.json

For each FSDP2 example (dist/examples.py: fsdp_comm, fsdp_compute; the CUDA sizes on a
GPU, the CPU ones on gloo) it times, median of 20 steps after 5 warm ones, each between
synchronizations:
- `fsdp_s`: the example's step (every Linear and the root a fully_shard unit, SGD);
- `plain_s`: the same model and step without FSDP2 (rank 0's own copy, no communication):
  what a 1-GPU run of the plain program measures;
- `host_work_s` = fsdp_s - plain_s at world size 1, where the collectives are copies: the
  work FSDP2 adds besides the wire (its hooks, DTensor dispatch, the copies into and out
  of its all-gather and reduce-scatter buffers, the unsharded parameters' frees and
  allocations, the sharded optimizer step);
and profiles one FSDP2 step (`OUT_DIR/<example>-w<world>.json.gz`, CPU and CUDA activity)
to see where that host time goes. One JSON line per example on rank 0, all of them in
OUT.json.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from gobrrr.dist.examples import EXAMPLES
from gobrrr.examples import mse_step, seeded_mlp

SIZES = {"fsdp_comm": (4096, 12, 4, 512, 8, 4), "fsdp_compute": (4096, 2, 16384, 256, 2, 8192)}


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _median_s(step, args, dev: torch.device, n: int = 20, warm: int = 5) -> float:
    for _ in range(warm):
        step(*args)
    times = []
    for _ in range(n):
        _sync(dev)
        dist.barrier()
        t0 = time.perf_counter()
        step(*args)
        _sync(dev)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(out: Path) -> None:
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if on_gpu else "gloo")
    dev = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = []
    for name, sizes in SIZES.items():
        width, depth, batch = sizes[:3] if on_gpu else sizes[3:]
        step, args = EXAMPLES[name].factory(batch, dev.type)
        fsdp_s = _median_s(step, args, dev)
        model = seeded_mlp(width, depth, dev, torch.nn.ReLU)
        plain = mse_step(model, torch.optim.SGD(model.parameters(), lr=1e-4))
        plain_s = _median_s(plain, args, dev)
        trace = out.parent / f"{name}-w{world}.json"
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
        with profile(activities=acts) as prof:
            for _ in range(2):
                step(*args)
            _sync(dev)
        if rank == 0:
            prof.export_chrome_trace(str(trace))
            with open(trace, "rb") as f, gzip.open(f"{trace}.gz", "wb") as g:
                shutil.copyfileobj(f, g)
            trace.unlink()
        row = {"example": name, "world_size": world, "device": str(dev),
               "width": width, "depth": depth, "batch": batch,
               "fsdp_s": fsdp_s, "plain_s": plain_s,
               "host_work_s": fsdp_s - plain_s if world == 1 else None,
               "torch": torch.__version__}
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
        del step, args, model, plain
        if on_gpu:
            torch.cuda.empty_cache()
    if rank == 0:
        out.write_text(json.dumps(rows, indent=1) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Issue 23: two DDP ranks' traces recorded the plain way (a `profile()` block around a
few steps, no schedule, no `prof.step()`), read by `gobrrr analyze`, against the no_sync
bound measured in the same job (each rank's step with and without DDP's all-reduce,
unprofiled, interleaved: (sync - no_sync) / sync).

    torchrun --standalone --nproc-per-node 2 benchmarks/plain_ranks.py OUT \
        [--example ddp_comm] [--batch N] [--device cpu|cuda]
    python benchmarks/plain_ranks.py --analyze OUT     # on any machine, afterwards

The first writes OUT/rank{0,1}.json (the traces) and OUT/bound.json (every rank's sync
and no_sync step); the second runs `gobrrr analyze` on the two traces, from the traced
span and with the job's sync step given (`--step-ms`), and prints each rank's exposed
communication share, alone and with DDP's bucket copies (which no_sync() removes too:
doctor's `no_sync_comparison` compares the same), beside its bound, in points
(OUT/analyze_vs_bound.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def step_s(step: Any, args: tuple, ctx: Any, device: str, n: int) -> float:
    """Seconds per step over n steps under `ctx()`, synchronized at the end."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        with ctx():
            step(*args)
    sync(device)
    return (time.perf_counter() - t0) / n


def record(out: Path, example: str, batch: int, device: str, rounds: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile

    from gobrrr.dist.examples import EXAMPLES
    from gobrrr.state.reach import walk

    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    rank = dist.get_rank()
    if device == "cuda":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    step, args = EXAMPLES[example].factory(batch, device)
    ddp = next(m for m in walk(step, args).modules if isinstance(m, DistributedDataParallel))
    ctxs = {"sync": contextlib.nullcontext, "no_sync": ddp.no_sync}
    for _ in range(3):
        for c in ctxs.values():
            step_s(step, args, c, device, 1)
    walls: dict[str, list[float]] = {k: [] for k in ctxs}
    for _ in range(rounds):
        for name, c in ctxs.items():
            dist.barrier()
            walls[name].append(step_s(step, args, c, device, 5))
    dist.barrier()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts, record_shapes=True) as prof:
        for _ in range(4):
            step(*args)
        sync(device)
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / f"rank{rank}.json"))
    mine = {"rank": rank, "sync_s": statistics.median(walls["sync"]),
            "no_sync_s": statistics.median(walls["no_sync"])}
    rows: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(rows, mine)
    if rank == 0:
        (out / "bound.json").write_text(json.dumps(
            {"example": example, "batch": batch, "device": device, "ranks": rows}, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def _analyze(out: Path, extra: list[str]) -> dict[str, Any]:
    traces = sorted(str(p) for p in out.glob("rank*.json"))
    p = subprocess.run([sys.executable, "-m", "gobrrr", "analyze", *traces, "--json",
                        *extra], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"analyze failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout)


def analyze(out: Path) -> None:
    bound = json.loads((out / "bound.json").read_text())
    sync_ms = max(r["sync_s"] for r in bound["ranks"]) * 1e3
    rows = []
    for label, extra in (("traced span", []), (f"--step-ms {sync_ms:.3f}",
                                                ["--step-ms", f"{sync_ms:.3f}"])):
        d = _analyze(out, extra)
        for r in d["distributed"]["ranks"]:
            b = next(x for x in bound["ranks"] if x["rank"] == r["rank"])
            share = r["fractions"]["communication"]
            # no_sync() also removes DDP's bucket copies (memory work in the budget)
            copies = (r["ddp_bucket_copy_s"] or 0.0) / r["wall_s"]
            b_frac = max(0.0, b["sync_s"] - b["no_sync_s"]) / b["sync_s"]
            rows.append({"rank": r["rank"], "read": label, "communication": share,
                         "bucket_copies": copies, "bound": b_frac,
                         "points": 100 * (share - b_frac),
                         "points_with_copies": 100 * (share + copies - b_frac),
                         "step_rule": d["workload"]["trace"].get("step_rule"),
                         "steps": d["workload"]["trace"].get("steps")})
    (out / "analyze_vs_bound.json").write_text(json.dumps(rows, indent=1))
    print(f"{bound['example']} batch {bound['batch']} on {bound['device']}")
    for r in rows:
        print(f"rank {r['rank']} ({r['read']}; {r['steps']} steps by {r['step_rule']}): "
              f"communication {r['communication']:.1%} (with DDP's bucket copies "
              f"{r['communication'] + r['bucket_copies']:.1%}) against the no_sync bound "
              f"{r['bound']:.1%}: {r['points']:+.1f} points ({r['points_with_copies']:+.1f})")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--analyze", action="store_true")
    ap.add_argument("--example", default="ddp_comm")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    o = ap.parse_args()
    if o.analyze:
        analyze(o.out)
    else:
        record(o.out, o.example, o.batch, o.device, o.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

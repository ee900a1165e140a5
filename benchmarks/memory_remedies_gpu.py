"""The memory remedies on the GPT-2 small training step (issue 26, item 3's done-when):
activation checkpointing per block (full and selective), zero_grad(set_to_none), fused
AdamW, bf16 autocast and expandable segments, each through gobrrr's own code
(gobrrr.memory_remedies: applied to a copy, verified by outputs, parameter updates and
gradients, its peak and A/B step time against the plain step's).

Beside it, a cross-check that does not go through gobrrr: the same model trained plain
and with transformers' own per-block checkpointing (model.gradient_checkpointing_enable,
non-reentrant), each alone in the process, its torch.cuda.max_memory_allocated over one
step and the median of 10 timed steps. gobrrr's saving should agree with it within the
allocator's rounding (both checkpoint each GPT2Block; gobrrr measures its copy's own
peak while other copies stay allocated: memory_remedies.py, step 2).

Usage (GPU machine; everything is written under OUT_DIR):
  python benchmarks/memory_remedies_gpu.py OUT_DIR            # GPT-2 small, 8 x 512, CUDA
  python benchmarks/memory_remedies_gpu.py OUT_DIR --tiny --device cpu   # a smoke test
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from gobrrr.memory_remedies import memory_remedies
from gobrrr.workload import Workload

TINY = {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128, "vocab_size": 256}
LR = 1e-4


def build(tiny: bool, batch: int, seq: int, device: str, ckpt: bool = False
          ) -> tuple[Any, Any, Any]:
    """(step, ids, model): GPT-2 (small, or TINY) with SDPA attention, dropout on,
    random weights from seed 0, AdamW; transformers' checkpointing when `ckpt`."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(**(TINY if tiny else {}))
    model = transformers.GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")
    model = model.to(device).train()
    if ckpt:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    g = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device, generator=g)

    def step(x: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        return loss.detach()

    return step, ids, model


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def crosscheck(tiny: bool, batch: int, seq: int, device: str) -> dict[str, Any]:
    """Plain vs transformers' own checkpointing, each alone: CUDA peak and step time."""
    if device != "cuda":
        return {"skipped": "CUDA only (torch.cuda.max_memory_allocated)"}
    out: dict[str, Any] = {}
    for ckpt in (False, True):
        gc.collect()
        torch.cuda.empty_cache()
        step, ids, model = build(tiny, batch, seq, device, ckpt)
        for _ in range(2):  # AdamW's state is created on the first step
            step(ids)
        _sync(device)
        torch.cuda.reset_peak_memory_stats()
        step(ids)
        _sync(device)
        peak = int(torch.cuda.max_memory_allocated())
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            step(ids)
            _sync(device)
            times.append(time.perf_counter() - t0)
        out["hf_checkpointing" if ckpt else "plain"] = {
            "max_allocated_bytes": peak, "step_s_median": statistics.median(times),
            "step_s": times}
        del step, ids, model
    p, c = out["plain"], out["hf_checkpointing"]
    out["bytes_saved"] = p["max_allocated_bytes"] - c["max_allocated_bytes"]
    out["time_cost"] = c["step_s_median"] / p["step_s_median"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="a 2-layer GPT-2 (smoke test)")
    ap.add_argument("--batch", type=int, default=None, help="default 8 (--tiny: 2)")
    ap.add_argument("--seq-len", type=int, default=None, help="default 512 (--tiny: 64)")
    ap.add_argument("--only", default=None, help="comma-separated memory remedies")
    ap.add_argument("--ab-budget-s", type=float, default=2.0)
    a = ap.parse_args()
    batch = a.batch or (2 if a.tiny else 8)
    seq = a.seq_len or (64 if a.tiny else 512)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__,
           "python": platform.python_version(), "device": a.device,
           "gpu": torch.cuda.get_device_name() if a.device == "cuda" else None}
    t0 = time.perf_counter()
    step, ids, _ = build(a.tiny, batch, seq, a.device)
    w = Workload("gpt2-tiny" if a.tiny else "gpt2", step, (ids,), {}, a.device, batch)
    # expandable segments runs `gobrrr memory hf:gpt2` in fresh processes: only for the
    # real model, which gobrrr can rebuild by name (the same config, SDPA, AdamW)
    target = None if a.tiny else "hf:gpt2"
    words = ["--batch-size", str(batch), "--seq-len", str(seq), "--train"]
    got = memory_remedies(w, only=a.only.split(",") if a.only else None, target=target,
                          target_words=words, ab_budget_s=a.ab_budget_s,
                          progress=lambda m: print(m, file=sys.stderr, flush=True))
    rows = [r.to_dict() for r in got.results]
    del step, ids, w
    print("cross-check: plain vs transformers' own checkpointing", file=sys.stderr)
    check = crosscheck(a.tiny, batch, seq, a.device)
    doc = {"what": "gobrrr memory remedies on the GPT-2 training step (AdamW)",
           "env": env, "model": "tiny" if a.tiny else "gpt2 small", "batch": batch,
           "seq_len": seq, "remedies": rows, "notes": got.notes,
           "crosscheck": check, "wall_s": time.perf_counter() - t0}
    path = a.out_dir / "memory_remedies.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        print(f"{r['name']:28} {r['status']:15} {r['reason']}")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

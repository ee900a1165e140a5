"""How much a training step's gradients hang on its random draws (dropout), and does a
bf16 autocast step draw the same dropout masks as fp32? (evaluate.py's gradient check.)

    python benchmarks/grad_seed_noise.py [--device cuda] [--batch 2] [--seq 128]

GPT-2 small from its config (random weights, train mode: dropout 0.1), one forward and
backward per run; per trained tensor, relative L2 of the gradient against fp32 at seed 1:
fp32 at seed 1 again, fp32 at seed 2, bf16 autocast at seed 1. Then one dropout mask
drawn at one seed on an fp32 and on a bf16 tensor of the same shape: the share of
elements where they agree. One JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import transformers


def _grads(model: torch.nn.Module, ids: torch.Tensor, seed: int, bf16: bool
           ) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with torch.autocast(ids.device.type, torch.bfloat16, enabled=bf16):
        loss = model(ids, labels=ids).loss
    loss.backward()
    return {n: p.grad.double().clone() for n, p in model.named_parameters()
            if p.grad is not None}


def _spread(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> dict[str, float]:
    errs = [((got[n] - ref[n]).norm() / ref[n].norm()).item() for n in ref]
    return {"median": statistics.median(errs), "max": max(errs), "min": min(errs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).to(a.device).train()
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), device=a.device)
    t0 = time.perf_counter()
    ref = _grads(model, ids, 1, False)
    row = {"device": a.device, "torch": torch.__version__, "batch": a.batch, "seq": a.seq,
           "tensors": len(ref),
           "fp32_same_seed": _spread(ref, _grads(model, ids, 1, False)),
           "fp32_other_seed": _spread(ref, _grads(model, ids, 2, False)),
           "bf16_autocast_same_seed": _spread(ref, _grads(model, ids, 1, True))}
    x = torch.ones(1 << 20, device=a.device)
    torch.manual_seed(3)
    m32 = torch.nn.functional.dropout(x, 0.1) != 0
    torch.manual_seed(3)
    m16 = torch.nn.functional.dropout(x.bfloat16(), 0.1) != 0
    row["dropout_mask_fp32_vs_bf16_agree"] = (m32 == m16).float().mean().item()
    row["s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(row))


if __name__ == "__main__":
    main()

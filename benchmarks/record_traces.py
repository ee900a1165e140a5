"""Record small raw `torch.profiler` traces on a GPU, for tests that read saved traces
(tests/data/traces/). Plain torch: no gobrrr code runs while recording, so the files are
what a user's own profiler run would write.

Usage: python3 benchmarks/record_traces.py OUT_DIR [NAME ...]   (default: all)
NAMES: mlp_b1_forward, mlp_train_step, pointwise_chain, gpt2_forward (GPT-2 small from
transformers' own config, random weights, 8 x 512 tokens, inference under no_grad: the
workload `gobrrr doctor hf:gpt2 --batch-size 8 --seq-len 512` diagnoses), attention
(hand-written softmax(q k^T) v, bf16 [8, 12, 4096, 64]: `gobrrr doctor examples:attention
--device cuda`), gpt2_train_step (one GPT-2 small training step, 4 x 256 tokens: the model's
own loss, backward, AdamW: `gobrrr doctor hf:gpt2 --train --batch-size 4 --seq-len 256`).
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(512, 512), nn.GELU())]).cuda()


def attention():
    """The issue's case, as examples.attention builds it on CUDA (written again here: no
    gobrrr code runs while recording)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(8, 12, 4096, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))

    def forward():
        with torch.no_grad():
            return torch.softmax((q @ k.transpose(-2, -1)) * 64 ** -0.5, dim=-1) @ v

    return forward


def gpt2_train_step():
    """models._train_step on hf:gpt2: zero_grad(set_to_none), the LM's own loss with the
    inputs as labels, backward, AdamW."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa", use_cache=False)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, model.config.vocab_size, (4, 256), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    return step


def record(name: str, step, out: Path, steps: int = 2) -> None:
    for _ in range(3):  # warm-up outside the profiler: cuBLAS handles, lazy init
        step()
    torch.cuda.synchronize()
    raw = out / f"{name}.json"
    # The trace is written when the active steps end (on_trace_ready): the profiler
    # clears its events at the end of each cycle, so exporting after the block is empty.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
        for _ in range(1 + steps):
            step()
            torch.cuda.synchronize()
            prof.step()
    with raw.open("rb") as src, gzip.open(out / f"{name}.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    print(name, (out / f"{name}.json.gz").stat().st_size, "bytes")


def gpt2_forward():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa")).cuda().eval()
    ids = torch.randint(0, model.config.vocab_size, (8, 512), device="cuda")

    def forward():
        with torch.no_grad():
            return model(input_ids=ids).logits

    return forward


def main() -> None:
    out = Path(sys.argv[1])
    names = sys.argv[2:] or ["mlp_b1_forward", "mlp_train_step", "pointwise_chain",
                             "gpt2_forward", "attention", "gpt2_train_step"]
    out.mkdir(parents=True, exist_ok=True)
    if "mlp_b1_forward" in names:
        model = mlp()
        x1 = torch.randn(1, 512, device="cuda")
        with torch.no_grad():
            record("mlp_b1_forward", lambda: model(x1), out)
    if "mlp_train_step" in names:
        train = mlp()
        opt = torch.optim.Adam(train.parameters(), lr=1e-3)
        x, y = torch.randn(64, 512, device="cuda"), torch.randn(64, 512, device="cuda")

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(train(x), y).backward()
            opt.step()

        record("mlp_train_step", step, out)
    if "pointwise_chain" in names:
        big = torch.randn(2**24, device="cuda")
        record("pointwise_chain", lambda: ((big * 2).sin() + 1).relu(), out)
    if "gpt2_forward" in names:
        record("gpt2_forward", gpt2_forward(), out)
    if "attention" in names:
        record("attention", attention(), out)
    if "gpt2_train_step" in names:
        # one profiled step: a GPT-2 training step's trace is ~10x its forward's
        record("gpt2_train_step", gpt2_train_step(), out, steps=1)


if __name__ == "__main__":
    main()

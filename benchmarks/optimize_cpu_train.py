"""Issue 24's CPU case as a target: a GPT-2 training step as a user writes it (AdamW with
two parameter groups, weight decay on the matrices only, a LambdaLR warm-up), run by

  gobrrr optimize benchmarks/optimize_cpu_train.py:make --budget-s 60 --json

The issue saw this kind of step start one candidate, abandon it and conclude "keep the
workload as it is" with nothing measured, and a winning snippet that dropped the user's
parameter groups. A small GPT-2 config (4 layers, 256 wide, 8 x 128 tokens) keeps a
step near 0.1 s on a 2-core CPU; random weights, no downloads.
"""

from __future__ import annotations

from typing import Any


def make(batch_size: int = 8, seq_len: int = 128) -> tuple[Any, tuple]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=seq_len,
                                       vocab_size=8192, attn_implementation="sdpa",
                                       use_cache=False))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-4,
                            betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
    ids = torch.randint(0, 8192, (batch_size, seq_len))

    def step(ids: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()

    return step, (ids,)

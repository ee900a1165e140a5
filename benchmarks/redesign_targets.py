"""Targets for benchmarks/redesign_gpu.sh: a torch.compile'd GPT-2 small, built from its
config with random weights (seed 0), so doctor sees a compiled model as a user has one."""

from __future__ import annotations

from typing import Any

import torch


def gpt2_compiled(batch_size: int = 8, device: str = "cuda") -> tuple[Any, tuple]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to(device).eval()
    g = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, 50257, (batch_size, 512), device=device, generator=g)
    compiled = torch.compile(model)

    def forward(ids: torch.Tensor) -> Any:
        with torch.no_grad():
            return compiled(ids).logits

    return forward, (ids,)

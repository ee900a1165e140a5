"""GPT-2 training steps whose dropout runs as a GPU runs it, for checks on a CPU
(benchmarks/fusion_bytes_check.py): on CUDA `F.dropout` calls `aten::native_dropout` (one
op: the output and a boolean mask) and its backward `native_dropout_backward`; on a CPU
it runs `bernoulli_` into a float mask, `div_` and `mul`. `gpt2_train_native_dropout`
swaps each `nn.Dropout` of a GPT-2 (4 layers, SDPA attention, whose own dropout stays
the math path's on a CPU; 2 x 256 tokens by default, random weights)
for the CUDA op, so a CPU counts the ops a GPU would; `gpt2_train` keeps the CPU's.
"""

from __future__ import annotations

from typing import Any

import torch


class NativeDropout(torch.nn.Module):
    """nn.Dropout as CUDA runs it: aten::native_dropout in training, identity in eval."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        return torch.native_dropout(x, self.p, True)[0]


def _step(batch_size: int, seq_len: int, device: str, native: bool) -> tuple[Any, tuple]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, attn_implementation="sdpa",
                                       use_cache=False)).to(device).train()
    if native:
        for m in list(model.modules()):
            for child, sub in list(m.named_children()):
                if isinstance(sub, torch.nn.Dropout):
                    setattr(m, child, NativeDropout(sub.p))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, model.config.vocab_size, (batch_size, seq_len), device=device)

    def step(ids: torch.Tensor) -> Any:
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach()

    return step, (ids,)


def gpt2_train_native_dropout(batch_size: int = 2, seq_len: int = 256,
                              device: str = "cpu") -> tuple[Any, tuple]:
    return _step(batch_size, seq_len, device, native=True)


def gpt2_train(batch_size: int = 2, seq_len: int = 256,
               device: str = "cpu") -> tuple[Any, tuple]:
    return _step(batch_size, seq_len, device, native=False)

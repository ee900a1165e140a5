"""Diagnostic targets for GPU sessions (FILE.py:NAME), not part of the validation suite.

`gpt2_train_compiled`: GPT-2 (124M, random weights) training step at 8 x 256 tokens as
issue 24's training row's winning stack runs it: AdamW with fused=True, bf16 autocast,
the whole step under torch.compile (default mode: the kernels without CUDA graphs, so
doctor's compiled path shows the generated kernels' time and the host's between them).
On the H100 (session ag) that stack with mode="reduce-overhead" measured 4.44x against
eager, predicted 7.73x: doctor of this target says whether the compiled step's kernels
or its host are above the prediction. `gpt2_train_eager_stack`: the same step without
the compile (autocast + fused AdamW), to read beside it.
Session ai (H100): the default-mode step took 31.1 ms a call for 8.6 ms of kernels (9 graph
breaks, 5 graphs; the prediction's whole step was 7.05 ms), and reduce-overhead measured
3.91x (~13.3 ms). `gpt2_train_compiled_ro`: the step under mode="reduce-overhead", for
doctor to split those 13.3 ms into replayed kernels and the host work left between graphs.
"""

from __future__ import annotations

from typing import Any


def _step(batch_size: int, device: str, compiled: bool,
          mode: str | None = None) -> tuple[Any, tuple]:
    import torch
    import transformers

    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(use_cache=False)
    model = transformers.GPT2LMHeadModel(config).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    ids = torch.randint(0, config.vocab_size, (batch_size, 256), device=device)

    def step(ids: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach()

    return (torch.compile(step, mode=mode) if compiled else step), (ids,)


def gpt2_train_compiled(batch_size: int = 8, device: str = "cuda") -> tuple[Any, tuple]:
    return _step(batch_size, device, compiled=True)


def gpt2_train_compiled_ro(batch_size: int = 8, device: str = "cuda"
                           ) -> tuple[Any, tuple]:
    return _step(batch_size, device, compiled=True, mode="reduce-overhead")


def gpt2_train_eager_stack(batch_size: int = 8, device: str = "cuda"
                           ) -> tuple[Any, tuple]:
    return _step(batch_size, device, compiled=False)

"""Real distributed programs for `gobrrr doctor` / `gobrrr optimize` under torchrun
(FILE.py:NAME targets), written the way a training script is: a `Trainer` object holding
a DDP-wrapped model, an AdamW optimizer and a warmup/cosine LR scheduler, whose
`train_step(batch)` is the step. gobrrr finds the DDP module through the bound `self`
(state.walk), for the no_sync experiment and to re-wrap `trainer.model` on a copy.

- gpt2_ddp: transformers' GPT2LMHeadModel from a GPT2Config, random weights. CUDA: GPT-2
  small (12 layers, 768 wide, vocab 50257; 124 M parameters, ~500 MB of fp32 gradients
  to all-reduce per step) at seq 512. CPU: 2 layers, 128 wide, vocab 1024, seq 64 (0.4 M
  parameters), a step of a few tens of ms on one core, for the tests.
- gpt2_ddp_bf16: the same under bf16 autocast (CUDA; on CPU the same as gpt2_ddp).
- resnet50_ddp: torchvision's resnet50 at 224x224 on CUDA; on CPU resnet18 at 32x32
  (10 classes). Needs torchvision (not installed in CI beside the CPU torch build).

The default process group must exist (gobrrr makes it under torchrun). Weights are seeded
identically on every rank (DDP also broadcasts rank 0's); each rank draws its own data.
Every Trainer built is appended to TRAINERS, so a script around gobrrr's Python API can
compare its state before and after (tests/test_dist_models.py).
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

__all__ = ["Trainer", "TRAINERS", "gpt2_ddp", "gpt2_ddp_bf16", "resnet50_ddp",
           "warmup_cosine"]

TRAINERS: list[Any] = []


def warmup_cosine(step: int, warmup: int, total: int) -> float:
    """The LR multiplier: linear warmup, then cosine decay to 10% (nanoGPT's schedule)."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def lm_loss(model: Any, batch: Any) -> Any:
    return model(input_ids=batch, labels=batch).loss


def classifier_loss(model: Any, batch: Any) -> Any:
    import torch

    images, labels = batch
    return torch.nn.functional.cross_entropy(model(images), labels)


class Trainer:
    """What a training script keeps: the wrapped model, the optimizer, the scheduler, a
    step counter. `train_step` is one optimizer step on one batch."""

    def __init__(self, model: Any, loss_fn: Any, lr: float = 3e-4, warmup: int = 10,
                 total: int = 1000, amp_dtype: Any = None, device: str = "cpu") -> None:
        import torch

        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, functools.partial(warmup_cosine, warmup=warmup, total=total))
        self.amp_dtype = amp_dtype
        self.device_type = device
        self.step = 0

    def train_step(self, batch: Any) -> Any:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        amp = (torch.autocast(self.device_type, dtype=self.amp_dtype)
               if self.amp_dtype is not None else contextlib.nullcontext())
        with amp:
            loss = self.loss_fn(self.model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return loss.detach()


def _world() -> tuple[int, Any]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("dist_targets need torchrun: torchrun --nproc-per-node 2 -m "
                           "gobrrr doctor benchmarks/dist_targets.py:gpt2_ddp")
    return dist.get_rank(), dist


def _device(device: str) -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else \
        torch.device("cpu")


def _seeded(build: Any) -> Any:
    """`build()` under seed 0 (the same weights on every rank), the global RNG left as
    it was."""
    import torch

    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        return build()
    finally:
        torch.random.set_rng_state(state)


def _ddp(model: Any, dev: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)


def _gpt2(batch_size: int, device: str, amp: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    rank, _dist = _world()
    dev = _device(device)
    if device == "cuda":
        config, seq = GPT2Config(), 512  # GPT-2 small: 12 x 768, vocab 50257
    else:
        config, seq = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1024,
                                 n_positions=64, bos_token_id=0, eos_token_id=0), 64
    model = _seeded(lambda: GPT2LMHeadModel(config)).to(dev).train()
    amp_dtype = torch.bfloat16 if amp and device == "cuda" else None
    trainer = Trainer(_ddp(model, dev), lm_loss, amp_dtype=amp_dtype, device=dev.type)
    TRAINERS.append(trainer)
    g = torch.Generator(device=dev).manual_seed(1 + rank)  # each rank its own data
    batch = torch.randint(0, config.vocab_size, (batch_size, seq), device=dev, generator=g)
    return trainer.train_step, (batch,)


def gpt2_ddp(batch_size: int = 4, device: str = "cpu") -> tuple[Any, tuple[Any, ...]]:
    """GPT-2 training step in a Trainer, DDP (module docstring). CUDA: use 8 per GPU."""
    return _gpt2(batch_size, device, amp=False)


def gpt2_ddp_bf16(batch_size: int = 4, device: str = "cpu") -> tuple[Any, tuple[Any, ...]]:
    """gpt2_ddp under bf16 autocast on CUDA."""
    return _gpt2(batch_size, device, amp=True)


def resnet50_ddp(batch_size: int = 8, device: str = "cpu") -> tuple[Any, tuple[Any, ...]]:
    """ResNet training step in a Trainer, DDP: resnet50 at 224 on CUDA, resnet18 at 32
    with 10 classes on CPU (module docstring). CUDA: use 64 per GPU."""
    import torch

    try:
        import torchvision
    except ImportError as exc:
        raise RuntimeError("resnet50_ddp needs torchvision (the release made for the "
                           f"installed torch): {exc}") from exc
    rank, _dist = _world()
    dev = _device(device)
    if device == "cuda":
        build, size, classes = torchvision.models.resnet50, 224, 1000
    else:
        build, size, classes = torchvision.models.resnet18, 32, 10
    model = _seeded(lambda: build(num_classes=classes)).to(dev).train()
    trainer = Trainer(_ddp(model, dev), classifier_loss, lr=1e-3, device=dev.type)
    TRAINERS.append(trainer)
    g = torch.Generator(device=dev).manual_seed(1 + rank)
    images = torch.randn(batch_size, 3, size, size, device=dev, generator=g)
    labels = torch.randint(0, classes, (batch_size,), device=dev, generator=g)
    return trainer.train_step, ((images, labels),)

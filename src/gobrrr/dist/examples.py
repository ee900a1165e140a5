"""Built-in distributed workloads (`examples:ddp_comm`, ...), for torchrun and the tests.

Each is a DDP training step (forward, MSE loss, backward, SGD step) on the default process
group, which gobrrr creates under torchrun. Sizes differ by device so each stays in its
regime with gloo on a 2-core CPU and with NCCL on datacenter GPUs alike:
- ddp_comm: a deep stack of wide Linear layers at a tiny batch: little math per step and
  every layer's gradient to all-reduce (CPU 8 x 512^2 fp32 = 8.4 MB, CUDA 12 x 4096^2 =
  805 MB per step): communication-bound.
- ddp_compute: two Linear layers at a large batch: the math grows with the batch, the
  gradients do not (CPU 2 x 256^2 = 0.5 MB for ~6 GFLOP per step; CUDA 2 x 4096^2 = 134 MB
  for ~3.3 TFLOP): compute-bound, its all-reduce hidden behind the backward pass.
- ddp_straggler: a small model, and rank 1 alone does extra matmuls before each step
  (CPU 12 x 512^3, ~12-25 ms on one core; CUDA 20 x 8192^3 bf16): its peers wait for it
  in every all-reduce.
- fsdp_comm / fsdp_compute: the same two extremes as FSDP2 (`torch.distributed.fsdp.
  fully_shard`, torch >= 2.6) on the default group, every Linear its own unit and the
  root a unit too. A step all-gathers each unit's parameters in the forward and again in
  the backward, and reduce-scatters its gradients: 3 x the parameter bytes x (n-1)/n on
  the wire per rank. fsdp_comm: CPU 8 x 512^2 fp32 (8.4 MB of parameters) at batch 4,
  CUDA 12 x 4096^2 (805 MB); fsdp_compute: CPU 2 x 256^2 at batch 8192 (~6 GFLOP),
  CUDA 2 x 4096^2 at batch 16384 (~3.3 TFLOP).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gobrrr.errors import UserError
from gobrrr.examples import Example, mse_step, seeded_mlp

__all__ = ["EXAMPLES"]


def _require_group() -> Any:
    import os

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        if os.environ.get("WORLD_SIZE") == "1":
            # under torchrun with one process gobrrr takes its single-process path
            raise UserError("the ddp_* and fsdp_* examples need 2 or more processes: "
                            "under torchrun --nproc-per-node 1 gobrrr runs as one "
                            "process; use --nproc-per-node 2")
        raise UserError("the ddp_* and fsdp_* examples need torchrun: gobrrr doctor "
                        "--nproc-per-node 2 examples:ddp_comm (or torchrun "
                        "--nproc-per-node 2 -m gobrrr doctor examples:ddp_comm)")
    return dist


def _ddp_step(width: int, depth: int, batch: int, device: str,
              extra: Callable[[], Any] | None = None) -> tuple[Callable[..., Any], tuple]:
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    _require_group()
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else "cpu"
    # the same weights on every rank (DDP also broadcasts rank 0's)
    ddp = DDP(seeded_mlp(width, depth, dev, nn.ReLU),
              device_ids=[dev.index] if device == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    return mse_step(ddp, opt, extra), _rank_data(batch, width, dev)


def _fsdp_step(width: int, depth: int, batch: int, device: str
               ) -> tuple[Callable[..., Any], tuple]:
    import torch
    from torch import nn

    _require_group()
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6: FSDP2 lived in torch.distributed._composable.fsdp
        raise UserError("the fsdp_* examples need torch >= 2.6 "
                        "(torch.distributed.fsdp.fully_shard)") from None
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else "cpu"
    # the same full weights on every rank: each keeps its shard
    model = seeded_mlp(width, depth, dev, nn.ReLU)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(dev.type if isinstance(dev, torch.device) else dev,
                            (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    return mse_step(model, opt), _rank_data(batch, width, dev)


def _rank_data(batch: int, width: int, dev: Any) -> tuple[Any, Any]:
    """(x, y) of this rank: each rank its own data, as data-parallel training has."""
    import torch

    g = torch.Generator(device=dev).manual_seed(1 + _rank())
    return (torch.randn(batch, width, device=dev, generator=g),
            torch.randn(batch, width, device=dev, generator=g))


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def ddp_comm(batch_size: int = 4, device: str = "cpu") -> tuple[Callable[..., Any], tuple]:
    """Communication-bound DDP step (module docstring)."""
    if device == "cuda":
        return _ddp_step(4096, 12, batch_size, device)
    return _ddp_step(512, 8, batch_size, device)


def ddp_compute(batch_size: int = 8192, device: str = "cpu"
                ) -> tuple[Callable[..., Any], tuple]:
    """Compute-bound DDP step (module docstring)."""
    if device == "cuda":
        return _ddp_step(4096, 2, batch_size, device)
    return _ddp_step(256, 2, batch_size, device)


def ddp_straggler(batch_size: int = 64, device: str = "cpu"
                  ) -> tuple[Callable[..., Any], tuple]:
    """A DDP step whose rank 1 does extra work first (module docstring)."""
    import torch

    # CPU: 12 fp32 512^3 matmuls, ~12-25 ms on one thread: a lateness several times the
    # few ms a shared 2-core machine's scheduling adds to either rank's step (with 4,
    # ~4.5 ms, rank 0 once measured less waiting than rank 1 under load)
    n, reps = (8192, 20) if device == "cuda" else (512, 12)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else "cpu"
    a = torch.randn(n, n, device=dev, dtype=dtype)
    extra: Callable[[], Any] | None = None
    if _require_group().get_rank() == 1:
        def extra() -> Any:
            for _ in range(reps):
                torch.mm(a, a)
    return _ddp_step(256 if device == "cpu" else 4096, 4, batch_size, device, extra)


def fsdp_comm(batch_size: int = 4, device: str = "cpu") -> tuple[Callable[..., Any], tuple]:
    """Communication-bound FSDP2 step (module docstring)."""
    if device == "cuda":
        return _fsdp_step(4096, 12, batch_size, device)
    return _fsdp_step(512, 8, batch_size, device)


def fsdp_compute(batch_size: int = 8192, device: str = "cpu"
                 ) -> tuple[Callable[..., Any], tuple]:
    """Compute-bound FSDP2 step (module docstring)."""
    if device == "cuda":
        return _fsdp_step(4096, 2, batch_size, device)
    return _fsdp_step(256, 2, batch_size, device)


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example("ddp_comm", "DDP step, deep wide Linear stack at a tiny batch (torchrun)",
                "communication", ddp_comm, 4, 16),
        Example("ddp_compute", "DDP step, 2 Linear layers at a large batch (torchrun)",
                "compute", ddp_compute, 8192, 16384),
        Example("ddp_straggler", "DDP step where rank 1 does extra work (torchrun)",
                "communication", ddp_straggler, 64, 256),
        Example("fsdp_comm", "FSDP2 step, deep wide Linear stack at a tiny batch (torchrun)",
                "communication", fsdp_comm, 4, 16),
        Example("fsdp_compute", "FSDP2 step, 2 Linear layers at a large batch (torchrun)",
                "compute", fsdp_compute, 8192, 16384),
    )
}

"""A training step's repeated blocks as nested compile regions (hierarchical compilation),
on CUDA: torch.compile of the whole step compiles one block's graph and stamps it out
for every layer, where it would otherwise trace, partition and lower each layer's
forward and backward on its own.

Measured on the H200 (torch 2.11):
- compile seconds (session s, `benchmarks/train_compile_cost.py`, one cold process
  each): the GPT-2 8x256 training step (bf16 autocast, fused AdamW) compiled whole in
  reduce-overhead mode, its GPT2Block marked, first call 30.9 s against 43.1 s, the step
  7.38 ms against 7.41 ms. The forward and backward alone (fp32, 4x128, default mode,
  session t) 32.8 s against 31.9 s: the saving is not the same everywhere. At
  --budget-s 60 that difference decides whether the hand search's stack can be measured
  at all (issue 24).
- gradients (session t, `benchmarks/nested_grad_check.py`): every one of GPT-2's 148
  parameter gradients within 2e-6 of eager's (relative to each tensor's largest), the
  same as without the region; a toy of LayerNorm -> Linear blocks exact.

Only on CUDA with torch 2.11, where those gradients were checked (CHECKED_TORCH): with
this project's torch 2.13.0+cpu the toy's first block came back with its gradients
wrong (each of its four tensors off by 100% of its largest value; exact without the
region; `benchmarks/results/cpu/nested_grad_check.jsonl`). The search also checks each
trained parameter's gradient against eager's (evaluate.py): a layer's wrong gradients
reject the candidate.
Inference compiles are left as they were: their compile fits, and what the lost fusion
across block boundaries costs them was not measured.

The region is set on a copy's blocks only: each block's class becomes a subclass whose
forward is the region, so the user's class is untouched. Binding the region per instance
instead computed a wrong loss on CPU (torch 2.13, `benchmarks/nested_region_check.py`:
1.503 against eager's 0.509); the subclass computed eager's loss (its gradients: above).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["repeated_blocks", "nest_blocks", "snippet_lines", "applies", "MIN_BLOCKS",
           "CHECKED_TORCH"]

# A container needs this many equal blocks for a region to pay: one block compiled,
# the rest reused.
MIN_BLOCKS = 2


# The torch releases (major.minor) whose gradients with the region were checked right on
# CUDA (module docstring): elsewhere the compile goes without it, only slower. The CPU
# build of 2.13 computed them wrong.
CHECKED_TORCH = ("2.11",)


def applies(ctx: Any) -> bool:
    """Whether a compile of this workload (a remedies.Context) marks its repeated blocks
    (module docstring): a training step on CUDA that has some, on a torch release whose
    gradients with the region were checked (CHECKED_TORCH)."""
    import torch

    release = ".".join(torch.__version__.split(".")[:2])
    return (ctx.device == "cuda" and ctx.training and bool(ctx.repeated_blocks)
            and release in CHECKED_TORCH)


def _param_shapes(m: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((n, tuple(p.shape)) for n, p in m.named_parameters())


def _runs(modules: Iterable[Any]) -> dict[type, list[Any]]:
    """The blocks of every ModuleList or Sequential holding MIN_BLOCKS or more modules of
    one class with the same parameter shapes (a ResNet stage whose first block carries
    a downsample is not one), by class; outermost first, nothing inside a block taken."""
    import torch

    found: dict[type, list[Any]] = {}
    inside: set[int] = set()
    for top in modules:
        for m in top.modules():
            if id(m) in inside or not isinstance(
                    m, (torch.nn.ModuleList, torch.nn.Sequential)):
                continue
            blocks = list(m.children())
            if len(blocks) < MIN_BLOCKS or len({type(b) for b in blocks}) != 1:
                continue
            if not any(True for _ in blocks[0].parameters()):
                continue
            if len({_param_shapes(b) for b in blocks}) != 1:
                continue
            found.setdefault(type(blocks[0]), []).extend(blocks)
            # a model reached twice (two closures) is visited once: its blocks are inside
            inside.update(id(x) for b in blocks for x in b.modules())
            inside.add(id(m))
    return found


def repeated_blocks(modules: Iterable[Any]) -> tuple[str, ...]:
    """What `nest_blocks` would mark: "GPT2Block x12" per class (read only)."""
    return tuple(f"{cls.__name__} x{len(blocks)}" for cls, blocks in _runs(modules).items())


def nest_blocks(modules: Iterable[Any]) -> tuple[str, ...]:
    """Mark the copy's repeated blocks (module docstring): each block's class set to a
    subclass whose forward is a nested compile region; what was marked. Nothing where
    this torch has no `torch.compiler.nested_compile_region`."""
    import torch

    region = getattr(torch.compiler, "nested_compile_region", None)
    if region is None:
        return ()
    runs = _runs(modules)
    for cls, blocks in runs.items():
        sub = type(cls.__name__, (cls,), {"forward": region(cls.forward),  # type: ignore[attr-defined]
                                          "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
        for b in blocks:
            b.__class__ = sub
    return tuple(f"{cls.__name__} x{len(blocks)}" for cls, blocks in runs.items())


def snippet_lines(blocks: Iterable[str]) -> str:
    """The user's version: their block class's forward marked, before the compile."""
    names = [b.split(" x")[0] for b in blocks]
    if not names:
        return ""
    lines = ["# the repeated block compiled once and reused for every layer"]
    lines += [f"{n}.forward = torch.compiler.nested_compile_region({n}.forward)"
              for n in names]
    return "\n".join(lines) + "\n"

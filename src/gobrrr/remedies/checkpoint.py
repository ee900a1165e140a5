"""Activation checkpointing per block (issue 26, item 3): memory bought with time.

A training step keeps every activation its backward will read; in a stack of identical
blocks (GPT-2's `transformer.h`, LLaMA's `model.layers`, a ResNet stage's Bottlenecks)
that is most of the step's peak. Checkpointing a block keeps only its inputs and runs its
forward again in the backward (torch.utils.checkpoint, non-reentrant: the recommended
form, which accepts keyword arguments and needs no input that requires grad), so the
peak loses nearly all of the blocks' activations and the step pays about one more
forward of the blocks (a forward is ~1/3 of a training step's FLOPs: ~+33% of the
blocks' compute at most).

Selective checkpointing (torch.utils.checkpoint.create_selective_checkpoint_contexts,
torch >= 2.4; the same API in 2.11 and 2.13) recomputes only cheap ops: pointwise ones
(torch's `pointwise` op tag: GELU's chain of mul/add/tanh, residual adds, dropout's
scaling), and with them views, in-place updates, random draws and new tensors (`_cheap`);
it keeps what is costly to redo (matmuls, attention, convolutions: MUST_SAVE) and every
other op's output (norms, softmax, reductions: PREFER_SAVE). It saves less memory than
the full form, for a recompute of memory-bound ops only.

The blocks are found on what the step reaches, never on a name list: a container
(nn.ModuleList or nn.Sequential) holding two or more children of one class that has
submodules of its own and is no container itself (a Sequential of stages is searched
inside: two Sequentials need not hold the same thing). A leaf (an nn.Linear) is no
block: checkpointing it keeps its input, which is all its backward keeps anyway.
Containers inside a block already found are not searched (a Bottleneck's `downsample`).

Applied to a copy only (remedies/base.py): each block's `forward` becomes an instance
attribute that calls the class's forward under checkpoint; the user's modules are never
touched. Checkpoint preserves the RNG state by default, so dropout draws the same masks
in the recompute, and the step's outputs and updates match the plain step's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gobrrr.remedies.base import Candidate, Context

__all__ = ["BlockGroup", "find_blocks", "blocks_reason", "selective_reason",
           "apply_full", "apply_selective", "pointwise_policy", "CHECKPOINTED"]

# the attribute a wrapped forward carries: "full" or "selective" (tests and reports read it)
CHECKPOINTED = "_gobrrr_checkpointed"

# What selective checkpointing always keeps: matmuls, attention and convolutions are the
# step's costly ops (compute-bound), whose recompute would cost what full checkpointing
# costs. Names, not objects: an op this torch lacks is skipped (getattr below).
_MUST_SAVE = ("mm", "addmm", "bmm", "baddbmm", "convolution",
              "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention",
              "_flash_attention_forward", "_efficient_attention_forward")
# ops that only make a new tensor (aten names' prefixes): recomputed, never saved
_CREATION = ("empty", "zeros", "ones", "full", "scalar_tensor", "arange", "new_")


@dataclass(frozen=True)
class BlockGroup:
    """One container's repeated blocks."""

    container: str  # its module name in the root ("" for the root itself)
    block_type: str  # the blocks' class name
    names: tuple[str, ...]  # the blocks' module names


def _outermost(modules: list[Any]) -> list[Any]:
    subs = {id(m) for r in modules for m in r.modules() if m is not r}
    return [r for r in modules if id(r) not in subs]


def _groups_of(root: Any) -> list[tuple[BlockGroup, list[Any]]]:
    import torch

    containers = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)
    found: list[tuple[BlockGroup, list[Any]]] = []
    inside: list[str] = []  # names of blocks found: their insides are not searched
    for name, mod in root.named_modules():
        if any(name == b or name.startswith(b + ".") for b in inside):
            continue
        if not isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        by_type: dict[type, list[tuple[str, Any]]] = {}
        for child_name, child in mod.named_children():
            by_type.setdefault(type(child), []).append((child_name, child))
        for cls, kids in by_type.items():
            if len(kids) < 2 or not any(True for _ in kids[0][1].children()):
                continue  # one of its kind, or a leaf: nothing to checkpoint per block
            if issubclass(cls, containers):
                continue  # containers alike say nothing of their contents: searched inside
            names = tuple(f"{name}.{k}" if name else k for k, _ in kids)
            found.append((BlockGroup(name, cls.__name__, names), [m for _, m in kids]))
            inside += names
    return found


def find_blocks(modules: list[Any]) -> list[tuple[BlockGroup, list[Any]]]:
    """Every container's repeated blocks in the outermost of `modules`, with the block
    modules themselves (module docstring)."""
    return [g for root in _outermost(modules) for g in _groups_of(root)]


def blocks_reason(modules: list[Any], trains: bool) -> str | None:
    """Why checkpointing per block does not apply (None: it does)."""
    if not trains:
        return ("the step runs no backward: no activations are kept for one, so there is "
                "nothing to recompute")
    if not modules:
        return "no nn.Module reached: no blocks to checkpoint"
    if not find_blocks(modules):
        return ("no repeated blocks: no nn.ModuleList or nn.Sequential holds two or more "
                "modules of one class with submodules of their own")
    return None


def selective_reason(modules: list[Any], trains: bool) -> str | None:
    import torch.utils.checkpoint as cp

    if not hasattr(cp, "create_selective_checkpoint_contexts"):
        return (f"torch {__import__('torch').__version__} has no selective checkpointing "
                "(torch.utils.checkpoint.create_selective_checkpoint_contexts, torch >= 2.4)")
    return blocks_reason(modules, trains)


def _cheap(op: Any) -> bool:
    """An op whose recompute costs at most a pass over memory: element-wise math (the
    `pointwise` tag), views, in-place updates, random draws (the same draws again: the
    RNG state is preserved) and new tensors (empty_like before dropout's bernoulli_).
    Saving a view, an in-place op or a tensor an in-place op fills would also fail: the
    cache refuses entries mutated after they were saved."""
    import torch

    tags = getattr(op, "tags", ())
    if torch.Tag.pointwise in tags or torch.Tag.nondeterministic_seeded in tags:
        return True
    schema = getattr(op, "_schema", None)
    if getattr(op, "is_view", False) or (schema is not None and schema.is_mutable):
        return True
    name = getattr(schema, "name", "").removeprefix("aten::")
    return name.startswith(_CREATION)


def pointwise_policy() -> Callable[..., Any]:
    """The selective policy: recompute the cheap ops, save the rest (module docstring)."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    aten = torch.ops.aten
    must_save = {getattr(aten, n).default for n in _MUST_SAVE
                 if hasattr(aten, n) and hasattr(getattr(aten, n), "default")}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        if op in must_save:
            return CheckpointPolicy.MUST_SAVE
        if _cheap(op):
            return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.PREFER_SAVE

    return policy


def _wrap(block: Any, kind: str, context_fn: Callable[[], Any] | None) -> None:
    import torch
    from torch.utils.checkpoint import checkpoint

    forward = block.forward  # bound: the class's forward (or one wrapped before)

    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # nothing is saved without autograd: no recompute
            return forward(*args, **kwargs)
        if context_fn is None:
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, context_fn=context_fn,
                          **kwargs)

    setattr(checkpointed, CHECKPOINTED, kind)
    block.forward = checkpointed  # an instance attribute: nn.Module.__call__ calls it


def _apply(cand: Candidate, kind: str, context_fn: Callable[[], Any] | None) -> Candidate:
    groups = find_blocks(cand.modules)
    if not groups:
        raise RuntimeError("no repeated blocks in the copy")
    n = 0
    for _, blocks in groups:
        for b in blocks:
            if getattr(b.forward, CHECKPOINTED, None):
                continue  # reached twice (a module shared by two roots)
            _wrap(b, kind, context_fn)
            n += 1
    cand.notes.append(f"{n} blocks checkpointed ({kind}): " + "; ".join(
        f"{g.container or '(root)'}: {len(g.names)} x {g.block_type}" for g, _ in groups))
    return cand


def apply_full(cand: Candidate, ctx: Context) -> Candidate:
    """Every block's forward under checkpoint (its activations recomputed in backward)."""
    return _apply(cand, "full", None)


def apply_selective(cand: Candidate, ctx: Context) -> Candidate:
    """Every block's forward under selective checkpoint (pointwise ops recomputed)."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return _apply(cand, "selective",
                  functools.partial(create_selective_checkpoint_contexts,
                                    pointwise_policy()))

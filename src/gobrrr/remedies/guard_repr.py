"""A tensor's repr made cheap while the search's candidates compile, on the torch releases
whose dynamo formats every tensor it guards by identity.

On torch 2.10 and 2.11, dynamo's ID_MATCH guard (`GuardBuilder.id_match_unchecked`)
annotates its guard with `repr(value)`, only for its verbose guard text. For a tensor that
is a copy to the host and a formatting pass, with a device synchronisation each time.
Compiling a training step's optimizer step guards every parameter and every state tensor
that way. Measured on the H200 (torch 2.11, issue 24, session v,
`benchmarks/sampler/`): in the search's background child compiling the GPT-2 8x256
training step (fused AdamW, bf16 autocast, reduce-overhead), stack samples put about
8.9 s of its 44 s compile in `Tensor.__repr__` under `guards.py:id_match_unchecked`.
torch 2.13 writes the value's type there instead (read in its source), so nothing is
changed elsewhere (REPR_GUARD_TORCH).

While held, `torch.Tensor.__repr__` returns the tensor's shape, dtype and device. The
guards' text is all it changes: it is what their failure messages print. The user's own
code printing a tensor during the search's warm calls (on a copy of their workload) prints
the short form too. The user's own compile, which doctor times, is left as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["short_tensor_repr", "REPR_GUARD_TORCH", "repr_guards"]

# The torch releases (major.minor) whose ID_MATCH guards call repr() on the value (module
# docstring): 2.11 measured, 2.10 from its source (the same function, found by others
# patching it out for XLA tensors).
REPR_GUARD_TORCH = ("2.10", "2.11")


def repr_guards(version: str) -> bool:
    """Whether dynamo of this torch version formats guarded tensors (module docstring)."""
    return ".".join(version.split("+")[0].split(".")[:2]) in REPR_GUARD_TORCH


def _short(t: Any, *args: Any, **kwargs: Any) -> str:
    return f"tensor(shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device})"


@contextlib.contextmanager
def short_tensor_repr() -> Iterator[None]:
    """Hold the short repr (module docstring) where this torch needs it; restored on
    exit, also when the body raises."""
    import torch

    if not repr_guards(torch.__version__):
        yield
        return
    old = torch.Tensor.__repr__
    torch.Tensor.__repr__ = _short  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.__repr__ = old  # type: ignore[method-assign,assignment]

"""Batch-1 linears' inputs made buffers of their own under Inductor (issue 21: the lean
decode step).

With coordinate-descent tuning on a GPU, Inductor writes a one-row matmul as a multiply
and a sum over the inputs (a GEMV reduction), and inlines the elementwise producer of that
one row into the reduction: every output row of the GEMV recomputes it. In a LLaMA MLP
the down projection's input is SiLU(gate) x up, so each of its 2048 output rows reloaded
both 5632-wide vectors and recomputed the SiLU (seen in Inductor's output code for
TinyLlama-1.1B on the H200, session o). Made a buffer first, the producer runs once, as
the epilogue of the kernel before it (no kernel is added: 313 per step either way), and
the GEMV only streams its weight. Measured there, one sitting, the lean decode step of
TinyLlama-1.1B bf16 at batch 1: 1.402 ms without, 1.286 ms with every batch-1 linear's
input realized (34.9% -> 38.0% of the bandwidth bound), 1.313 ms with the down
projections' only.

The barrier is `gobrrr::materialize`, an identity op (eager: a copy) whose Inductor
lowering realizes its input and returns it: no copy in the compiled code. It is applied
by forward pre-hooks on the model's `nn.Linear` modules, for inputs of exactly one row
(the case Inductor writes as a reduction), only while `realized_linear_inputs` is
entered: the model has no hook afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["realized_linear_inputs", "register"]

_STATE: dict[str, Any] = {}  # "why": None once registered, else why not (one line)


def register() -> str | None:
    """Define the op and its lowering once; None when done, else why it cannot be."""
    if "why" in _STATE:
        return _STATE["why"]
    import torch

    try:
        from torch._inductor.lowering import register_lowering  # private: may move
    except Exception as exc:  # noqa: BLE001 - an optimisation: the step compiles without it
        _STATE["why"] = (f"Inductor's register_lowering is not importable "
                         f"({type(exc).__name__}: {exc})")
        return _STATE["why"]

    # the schema is given: this module's annotations are strings, which the op's
    # schema inference cannot read for a function defined here
    @torch.library.custom_op("gobrrr::materialize", mutates_args=(),
                             schema="(Tensor x) -> Tensor")
    def materialize(x: Any) -> Any:
        return x.clone()

    @materialize.register_fake
    def _(x: Any) -> Any:
        return torch.empty_like(x)

    @register_lowering(torch.ops.gobrrr.materialize.default, type_promotion_kind=None)
    def _lower(x: Any) -> Any:  # an Inductor TensorBox: computed once, then read
        x.realize()
        return x

    _STATE["why"] = None
    return None


@contextlib.contextmanager
def realized_linear_inputs(model: Any) -> Iterator[int]:
    """While entered, a one-row input of any `nn.Linear` in `model` passes through
    `gobrrr::materialize` (module docstring). Yields how many linears are hooked (0 when
    the op could not be registered); the hooks are removed on exit."""
    import torch

    if register() is not None:
        yield 0
        return

    def realize(module: torch.nn.Linear, args: tuple[Any, ...]) -> Any:
        x = args[0] if args else None
        if isinstance(x, torch.Tensor) and x.numel() == module.in_features:
            return (torch.ops.gobrrr.materialize(x), *args[1:])
        return None

    handles = [m.register_forward_pre_hook(realize) for m in model.modules()
               if isinstance(m, torch.nn.Linear)]
    try:
        yield len(handles)
    finally:
        for h in handles:
            h.remove()

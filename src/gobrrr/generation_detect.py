"""A callable that generates (issue 21, item 1): `gobrrr.diagnose(lambda:
model.generate(ids, max_new_tokens=64))` is read as a generation, prefill and decode
apart, without the user saying so.

Only when the callable reaches (through its closure, arguments and their attributes: the
state walker's reach) a model with `generate` and a `generation_config` (a transformers
causal LM) is anything tried: one call of the callable with every such model's
`generate` wrapped (an instance attribute, removed afterwards; the user's state put back
as after any diagnosis) records the first call's prompt and `max_new_tokens`. A callable
that never calls `generate` then goes the ordinary way.

The generation source (generation_run.py) then times greedy generation of exactly that
many tokens after that prompt: the call's other generation arguments (sampling, beams,
stopping strings) are not used, and the report's notes name them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gobrrr.state import preserved_state, walk
from gobrrr.workload import Workload

__all__ = ["FoundGeneration", "find_generation", "IGNORED_NOTE"]

IGNORED_NOTE = ("the callable calls {name}.generate: diagnosed as greedy generation of "
                "exactly {n} new tokens after its {b} x {t} prompt")
_OWN = ("input_ids", "inputs", "max_new_tokens", "min_new_tokens", "pad_token_id",
        "attention_mask")


@dataclass
class FoundGeneration:
    model: Any
    input_ids: Any
    new_tokens: int
    other_kwargs: dict[str, Any] = field(default_factory=dict)  # not used: said

    def note(self) -> str:
        b, t = (int(s) for s in self.input_ids.shape[:2])
        text = IGNORED_NOTE.format(name=type(self.model).__name__, n=self.new_tokens, b=b,
                                   t=t)
        if self.other_kwargs:
            text += ("; its other arguments were not used: "
                     + ", ".join(sorted(self.other_kwargs)))
        return text


def _generators(w: Workload) -> list[Any]:
    reach = walk(w.fn, w.args, w.kwargs)
    return [m for m in reach.modules
            if callable(getattr(m, "generate", None)) and hasattr(m, "generation_config")]


def find_generation(w: Workload) -> FoundGeneration | None:
    """The first `generate` call one call of `w` makes (module docstring), or None."""
    import torch

    models = _generators(w)
    if not models:
        return None
    calls: list[tuple[Any, tuple, dict]] = []

    def wrapped(model: Any) -> Any:
        original = model.generate  # the bound method of its class

        def generate(*args: Any, **kwargs: Any) -> Any:
            calls.append((model, args, dict(kwargs)))
            return original(*args, **kwargs)

        return generate

    # a `generate` the user set on the instance itself is put back as it was
    own = {id(m): m.__dict__["generate"] for m in models if "generate" in m.__dict__}
    for m in models:
        m.generate = wrapped(m)
    try:
        with preserved_state(w):
            w.run("looking for a generate call")
    finally:
        for m in models:
            m.__dict__.pop("generate", None)
            if id(m) in own:
                m.__dict__["generate"] = own[id(m)]
    if not calls:
        return None
    model, args, kwargs = calls[0]
    ids = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return None
    n = kwargs.get("max_new_tokens")
    if n is None:
        n = getattr(model.generation_config, "max_new_tokens", None)
    if n is None and getattr(model.generation_config, "max_length", None):
        n = int(model.generation_config.max_length) - int(ids.shape[1])
    if not isinstance(n, int) or n < 2:
        return None
    other = {k: v for k, v in kwargs.items()
             if k not in _OWN and not (k == "do_sample" and not v)}  # greedy is ours too
    return FoundGeneration(model, ids, n, other)

"""What a script's window measured, as plain data: the script's process (script.py)
fills it when the window closes, and the report is made from it (script_report.py), in
`gobrrr run`'s child process (cli/run_report.py) or, for a trainer's callback and under
torchrun, in the same process.

Everything here pickles without the script's own objects: the window's timing, the
trace's path, the ceilings (calibrated in the script's process: its thread count, its
device, its RNG kept), and the facts the remedies read from the script's modules,
optimizers and DataLoaders, read from them before the hand-off. An optimizer becomes an
`OptimizerFacts`: its class, its constructor's signature, its defaults and parameter
groups with each parameter a meta tensor (shape and dtype, no storage), rebuilt in the
report's process (`rebuilt`) as the object the remedies read (remedies/optim.py: the
class's name and path, `defaults`, `param_groups`).

This module imports nothing of the analysis: the script's process loads it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gobrrr.hardware import Ceilings
    from gobrrr.remedies.data import LoaderFacts

__all__ = ["Timed", "Window", "OptimizerFacts", "optimizer_facts", "STEP_SOURCES",
           "CALLER_SOURCES", "IN_PLACE_NOTE"]

# How the steps were found, in the report's words.
STEP_SOURCES = {"optimizer": "each step() of the first optimizer that stepped",
                "forward": "each completed forward of the first outermost module",
                "manual": "each gobrrr.step() call in the script",
                "hf_trainer": "each optimizer step of the HF Trainer (its on_step_end)",
                "lightning": "each optimizer step of the Lightning Trainer (its "
                             "global_step, at on_train_batch_end)"}
# The sources a caller sets (a trainer's callback: StepWindow), never found by the hooks.
CALLER_SOURCES = ("hf_trainer", "lightning")

# The report's word on its remedies: they were not tried on a copy.
IN_PLACE_NOTE = ("remedies in place are predictions: gobrrr cannot verify them without "
                 "a copy of the workload. Verify one with `gobrrr optimize` on a target "
                 "(FILE.py:NAME returning the step and its inputs), or run the script "
                 "again with the change, `--json` both times, and `gobrrr compare` them")


@dataclass
class Timed:
    """What one process's window measured, apart from its trace (under torchrun every
    rank sends its own to rank 0)."""

    rank: int
    source: str  # a key of STEP_SOURCES
    device: str
    warmup: int
    profiled: int
    step_s: list[float]
    window_s: float
    loading_s: list[float]
    first_batches: list[float]
    series: list[tuple[str, float]]
    loaders: list[LoaderFacts]
    skipped_steps: int = 0


@dataclass
class Window:
    """What the report of a closed window is made from (module docstring). `facts`:
    remedies.base.Context's fields of the script's objects, its optimizers as
    OptimizerFacts; `started_s`: time.perf_counter() when the window closed (the report's
    diagnose_s counts from it; the clock is the system's monotonic one, the same in a
    child process)."""

    name: str
    timed: Timed
    trace_path: Path
    ceilings: Ceilings
    facts: dict[str, Any]
    started_s: float


class _Shown:
    """A value that does not travel (a tensor, an object of the script's), as the snippet
    shows it: its repr; `shape` when it was a tensor (remedies/optim._same never takes a
    tensor for a default)."""

    def __init__(self, text: str, shape: tuple[int, ...] | None) -> None:
        self.text = text
        if shape is not None:
            self.shape = shape

    def __repr__(self) -> str:
        return self.text


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _portable(value: Any) -> Any:
    """`value` as the report's process can hold it: plain values and tuples and lists of
    them as they are, anything else as its repr (_Shown)."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (tuple, list)) and all(isinstance(v, _PLAIN) for v in value):
        return value
    return _Shown(repr(value), tuple(value.shape) if _is_tensor(value) else None)


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


@dataclass
class OptimizerFacts:
    """An optimizer as the remedies read it, without its tensors (module docstring).
    `signature`: the constructor's parameters as (name, kind, default) with
    inspect.Parameter.empty for none, None where inspect cannot read it."""

    module: str
    qualname: str
    torch_own: bool  # torch.optim.<name> is its class: rebuilt as an instance of it
    signature: list[tuple[str, int, Any]] | None
    defaults: dict[str, Any]
    param_groups: list[dict[str, Any]] = field(default_factory=list)

    def rebuilt(self) -> Any:
        """An object with the optimizer's class (torch's own) or a class of the same
        name, module and signature, its `defaults` and `param_groups`, no state."""
        import torch

        cls: Any
        if self.torch_own:
            cls = getattr(torch.optim, self.qualname)
        else:
            sig: Any = "unreadable"  # inspect.signature raises TypeError, as on the original
            if self.signature is not None:
                sig = inspect.Signature([
                    inspect.Parameter(n, inspect._ParameterKind(k), default=d)
                    for n, k, d in self.signature])
            cls = type(self.qualname.rsplit(".", 1)[-1], (),
                       {"__module__": self.module, "__qualname__": self.qualname,
                        "__signature__": sig})
        opt = cls.__new__(cls)
        opt.__dict__.update(defaults=dict(self.defaults), state={},
                            param_groups=[dict(g) for g in self.param_groups])
        return opt


def optimizer_facts(opt: Any) -> OptimizerFacts:
    """Read an optimizer (nothing is called): each parameter a meta tensor of its shape
    and dtype (the remedies count them and their bytes), every other value _portable."""
    import torch

    cls = type(opt)
    try:
        params = list(inspect.signature(cls).parameters.values())
        signature: list[tuple[str, int, Any]] | None = [
            (p.name, int(p.kind), p.default if p.default is inspect.Parameter.empty
             else _portable(p.default)) for p in params]
    except (TypeError, ValueError):
        signature = None

    def meta(p: Any) -> Any:
        return torch.empty(tuple(p.shape), dtype=p.dtype, device="meta")

    groups = [{k: [meta(p) for p in v] if k == "params" else _portable(v)
               for k, v in g.items()} for g in opt.param_groups]
    return OptimizerFacts(
        module=cls.__module__, qualname=cls.__qualname__,
        torch_own=getattr(torch.optim, cls.__name__, None) is cls, signature=signature,
        defaults={k: _portable(v) for k, v in getattr(opt, "defaults", {}).items()},
        param_groups=groups)

"""Workloads: "a callable and its arguments", loaded from a target string and scaled in
batch. The user's state while gobrrr runs it is state.py's job.

Targets:
  None or "examples:NAME"   a built-in workload (examples.py)
  "path/to/file.py:NAME"    NAME() -> (callable, args_tuple), or a factory
                            NAME(batch_size[, device]) -> (callable, args_tuple)
  "hf:NAME", "timm:NAME", "torchvision:NAME"
                            a library's model with random weights (models.py)
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gobrrr.errors import UserError, WorkloadError

if TYPE_CHECKING:
    from gobrrr.models import ModelOptions

__all__ = ["Workload", "load_target", "from_callable", "DEFAULT_EXAMPLE"]

DEFAULT_EXAMPLE = "mlp"
Factory = Callable[..., Any]


@dataclass
class Workload:
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    batch_size: int | None = None
    factory: Factory | None = None  # factory(batch_size) -> (fn, args); scales exactly
    description: str = ""
    # The same work as eager PyTorch, for a callable that replays a CUDA graph: counted
    # for FLOPs and bytes, never timed (gobrrr.diagnose(..., eager=...)).
    eager: Callable[..., Any] | None = None
    # what a model target was built from (models.py: library, config, dtype, mode)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report's `workload` entry."""
        return {"name": self.name, "description": self.description, "device": self.device,
                "batch_size": self.batch_size, **self.details}

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)

    def run(self, where: str) -> Any:
        """Call the workload, turning the user's exception into a WorkloadError."""
        try:
            return self()
        except Exception as exc:  # the user's code: any exception is theirs to see
            raise WorkloadError(where, exc) from exc

    def scaled(self, factor: int) -> Workload:
        """The same workload at `factor` x the batch.

        With a factory the batch is rebuilt exactly. Without one, tensor arguments are
        repeated along dim 0 (an assumption that dim 0 is the batch; the reason is raised
        as a UserError when no tensor argument can be scaled)."""
        if self.factory is not None and self.batch_size is not None:
            big = _call_factory(self.name, self.factory, self.batch_size * factor,
                                self.device, self.description)
            big.details = self.details
            return big
        import torch

        scaled_any = False

        def scale(x: Any) -> Any:
            nonlocal scaled_any
            if isinstance(x, torch.Tensor) and x.dim() >= 1:
                scaled_any = True
                return torch.cat([x.detach()] * factor).requires_grad_(x.requires_grad)
            return x

        args = tuple(scale(a) for a in self.args)
        kwargs = {k: scale(v) for k, v in self.kwargs.items()}
        if not scaled_any:
            raise UserError("cannot scale the batch: no tensor argument with a dim 0 "
                            "(give a factory make_workload(batch_size) instead)")
        return Workload(self.name, self.fn, args, kwargs, self.device,
                        None if self.batch_size is None else self.batch_size * factor,
                        None, self.description, details=self.details)


def _infer_device(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The device of the first tensor found in the arguments, the callable (a module's
    parameters), the object it is bound to, or the variables it closes over (a
    `lambda: model(x)` names nothing else); a CUDA graph's `replay` runs on CUDA."""
    import torch

    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.cuda.CUDAGraph):
        return "cuda"
    cells: list[Any] = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # a cell not yet assigned
            continue
    for obj in [*args, *kwargs.values(), fn, owner, *cells]:
        if isinstance(obj, torch.Tensor):
            return obj.device.type
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                return p.device.type
    return "cpu"


def _infer_batch(args: tuple[Any, ...]) -> int | None:
    import torch

    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() >= 1:
            return int(a.shape[0])
    return None


def from_callable(fn: Callable[..., Any], args: tuple[Any, ...] = (),
                  kwargs: dict[str, Any] | None = None, name: str | None = None) -> Workload:
    if not callable(fn):
        raise UserError(f"the target is not callable: {type(fn).__name__}")
    kwargs = kwargs or {}
    label = name or str(getattr(fn, "__name__", type(fn).__name__))
    return Workload(label, fn, tuple(args),
                    kwargs, _infer_device(fn, tuple(args), kwargs), _infer_batch(tuple(args)))


def _check_pair(name: str, got: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    if (not isinstance(got, tuple) or len(got) != 2 or not callable(got[0])
            or not isinstance(got[1], (tuple, list))):
        raise UserError(f"{name} must return (callable, args_tuple), got "
                        f"{type(got).__name__}")
    return got[0], tuple(got[1])


def _call_factory(name: str, factory: Factory, batch_size: int | None, device: str,
                  description: str = "") -> Workload:
    params = inspect.signature(factory).parameters
    kwargs: dict[str, Any] = {}
    if "device" in params:
        kwargs["device"] = device
    try:
        got = factory(batch_size, **kwargs) if batch_size is not None else factory(**kwargs)
    except Exception as exc:
        raise WorkloadError(f"building {name}", exc) from exc
    fn, args = _check_pair(name, got)
    w = from_callable(fn, args, name=name)
    w.factory, w.batch_size, w.description = factory, batch_size, description
    if "device" in params:
        w.device = device
    return w


def _default_batch(factory: Factory) -> int | None:
    params = list(inspect.signature(factory).parameters.values())
    positional = [p for p in params if p.name != "device"]
    if not positional:
        return None
    first = positional[0]
    return first.default if isinstance(first.default, int) else 1


def _load_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"_gobrrr_target_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise WorkloadError(f"importing {path}", exc) from exc
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(path.parent))
    return module


def load_target(target: str | None, device: str, batch_size: int | None = None,
                model_options: ModelOptions | None = None) -> Workload:
    """Resolve a target string to a Workload on `device` (see module docstring).
    `model_options` (--seq-len, --image-size, --dtype, --train) are for model targets
    only; given with another target, they are a UserError."""
    from gobrrr import examples, models

    if target is not None and models.is_model_target(target):
        return models.load(target, device, batch_size, model_options or models.ModelOptions())
    models.refuse_options(target, model_options)
    if target is None or target.startswith("examples:"):
        name = DEFAULT_EXAMPLE if target is None else target.split(":", 1)[1]
        ex = examples.get(name)  # raises UserError for unknown names
        return _call_factory(f"examples:{name}", ex.factory,
                             batch_size or ex.default_batch(device), device, ex.description)
    if ":" not in target:
        raise UserError(f"target {target!r} must be FILE.py:NAME or examples:NAME")
    file_part, _, attr = target.rpartition(":")
    path = Path(file_part)
    if not path.is_file():
        raise UserError(f"no such file: {file_part}")
    module = _load_module(path)
    if not hasattr(module, attr):
        raise UserError(f"{file_part} has no attribute {attr!r}")
    factory = getattr(module, attr)
    if not callable(factory):
        raise UserError(f"{target} is not callable")
    params = [p for p in inspect.signature(factory).parameters.values() if p.name != "device"]
    if params:
        return _call_factory(target, factory, batch_size or _default_batch(factory), device)
    if batch_size is not None:
        raise UserError(f"--batch-size given but {target} takes no batch_size argument")
    return _call_factory(target, factory, None, device)

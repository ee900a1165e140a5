"""Workloads: "a callable and its arguments", built from a callable or a factory and
scaled in batch. Target strings become workloads in targets.py; the user's state while
gobrrr runs one is state/'s job.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gobrrr.errors import UserError, WorkloadError

__all__ = ["Workload", "from_callable", "call_factory", "check_pair", "Factory"]

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
    # how another process builds this workload again (remedies/compile_child.py: the
    # CLI's target, device, batch size, model options); None: a callable, this process's
    reload: dict[str, Any] | None = None

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
            big = call_factory(self.name, self.factory, self.batch_size * factor,
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


def check_pair(name: str, got: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    if (not isinstance(got, tuple) or len(got) != 2 or not callable(got[0])
            or not isinstance(got[1], (tuple, list))):
        shown = (f"({', '.join(type(x).__name__ for x in got)})" if isinstance(got, tuple)
                 and len(got) <= 4 else type(got).__name__)
        why = (": its first item is not callable" if isinstance(got, tuple) and len(got) == 2
               and not callable(got[0]) else
               ": its second item is not a tuple of arguments" if isinstance(got, tuple)
               and len(got) == 2 else "")
        raise UserError(f"{name} must return (callable, args_tuple), got {shown}{why}")
    return got[0], tuple(got[1])


def call_factory(name: str, factory: Factory, batch_size: int | None, device: str,
                  description: str = "") -> Workload:
    params = inspect.signature(factory).parameters
    kwargs: dict[str, Any] = {}
    if "device" in params:
        kwargs["device"] = device
    try:
        got = factory(batch_size, **kwargs) if batch_size is not None else factory(**kwargs)
    except Exception as exc:
        raise WorkloadError(f"building {name}", exc) from exc
    fn, args = check_pair(name, got)
    w = from_callable(fn, args, name=name)
    w.factory, w.batch_size, w.description = factory, batch_size, description
    if "device" in params:
        w.device = device
    return w

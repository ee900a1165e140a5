"""Workloads: "a callable and its arguments", loaded from a target string, scaled in batch,
and the user's state protected while gobrrr runs it.

Targets:
  None or "examples:NAME"   a built-in workload (examples.py)
  "path/to/file.py:NAME"    NAME() -> (callable, args_tuple), or a factory
                            NAME(batch_size[, device]) -> (callable, args_tuple)
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gobrrr.errors import UserError, WorkloadError

__all__ = ["Workload", "load_target", "from_callable", "preserved_state", "DEFAULT_EXAMPLE",
           "reachable_state", "collect_state", "is_state", "global_names",
           "MAX_STATE_DEPTH"]

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
            return _call_factory(self.name, self.factory, self.batch_size * factor,
                                 self.device, self.description)
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
                        None, self.description)


def _infer_device(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    import torch

    for obj in [*args, *kwargs.values(), fn, getattr(fn, "__self__", None)]:
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


def load_target(target: str | None, device: str, batch_size: int | None = None) -> Workload:
    """Resolve a target string to a Workload on `device` (see module docstring)."""
    from gobrrr import examples

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


# ---------------------------------------------------------------- protecting user state


# Closures of closures of ...: state nested deeper than this is not found (optimize
# reports what stays shared; see remedies/copying.py).
MAX_STATE_DEPTH = 6


def is_state(obj: Any) -> bool:
    import torch

    return isinstance(obj, (torch.nn.Module, torch.optim.Optimizer, torch.Tensor))


def global_names(code: types.CodeType) -> set[str]:
    """Global names a function's code (and its inner functions and lambdas) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def _cell_full(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - raises ValueError on an empty cell
    except ValueError:
        return False
    return True


def collect_state(root: Any, depth: int = 0, seen: set[int] | None = None) -> list[Any]:
    """Modules, optimizers and tensors reachable from `root`: closures, bound self,
    containers, object attributes and the module globals a function's code names (a
    training step in a script usually reaches its model and optimizer as globals)."""
    seen = set() if seen is None else seen
    out: list[Any] = []
    if id(root) in seen or depth > MAX_STATE_DEPTH:
        return out
    seen.add(id(root))
    if is_state(root):
        out.append(root)
        return out
    children: list[Any] = []
    if isinstance(root, types.FunctionType):
        children += [c.cell_contents for c in root.__closure__ or () if _cell_full(c)]
        children += [root.__globals__[n] for n in global_names(root.__code__)
                     if n in root.__globals__ and (is_state(root.__globals__[n]) or
                                                   isinstance(root.__globals__[n],
                                                              types.FunctionType))]
    elif isinstance(root, types.MethodType):
        children += [root.__func__, root.__self__]
    elif isinstance(root, (list, tuple)):
        children += list(root)
    elif isinstance(root, dict):
        children += list(root.values())
    elif hasattr(root, "__dict__") and not isinstance(root, (type, types.ModuleType)):
        children += list(vars(root).values())
    for c in children:
        out += collect_state(c, depth + 1, seen)
    return out


def reachable_state(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                    ) -> tuple[list[Any], list[Any], list[Any]]:
    """(modules, optimizers, tensors) the call `fn(*args, **kwargs)` can reach."""
    import torch

    found = collect_state([fn, list(args), kwargs])
    return ([o for o in found if isinstance(o, torch.nn.Module)],
            [o for o in found if isinstance(o, torch.optim.Optimizer)],
            [o for o in found if isinstance(o, torch.Tensor)])


def _read_flags() -> dict[tuple[Any, str], Any]:
    """The torch.backends switches a remedy or a measurement may flip. torch >= 2.9 also
    has per-backend `fp32_precision` strings, and refuses to read some of them once the
    legacy `allow_tf32` flags were set: read what can be read, restore exactly that."""
    import torch

    b = torch.backends
    candidates = [(b.cuda.matmul, "allow_tf32"), (b.cudnn, "allow_tf32"),
                  (b.cudnn, "benchmark"), (b.cudnn, "deterministic"),
                  (b.cuda.matmul, "allow_bf16_reduced_precision_reduction"),
                  (b.cuda.matmul, "allow_fp16_reduced_precision_reduction")]
    flags: dict[tuple[Any, str], Any] = {}
    for obj, attr in candidates:
        try:
            flags[(obj, attr)] = getattr(obj, attr)
        except (AttributeError, RuntimeError):
            continue
    return flags


@contextlib.contextmanager
def preserved_state(w: Workload) -> Iterator[None]:
    """Run gobrrr's many calls of the workload without leaving a trace on the user's
    things: parameters, buffers, gradients, optimizer state, input tensors, RNG state and
    the torch.backends flags are restored on exit."""
    import torch

    modules, optims, tensors = reachable_state(w.fn, w.args, w.kwargs)
    with torch.no_grad():
        mod_state = [
            ({k: v.detach().clone() for k, v in m.state_dict(keep_vars=True).items()},
             [(p, None if p.grad is None else p.grad.detach().clone())
              for p in m.parameters()])
            for m in modules
        ]
        opt_state = [(o, copy.deepcopy(o.state_dict())) for o in optims]
        tensor_state = [(t, t.detach().clone(), None if t.grad is None else t.grad.clone())
                        for t in tensors]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    flags = _read_flags()
    try:
        yield
    finally:
        with torch.no_grad():
            for m, (sd, grads) in zip(modules, mod_state, strict=True):
                current = m.state_dict(keep_vars=True)
                for k, v in sd.items():
                    current[k].data.copy_(v)
                for p, g in grads:
                    p.grad = g
            for o, sd_o in opt_state:
                o.load_state_dict(sd_o)
            for t, saved, g in tensor_state:
                t.data.copy_(saved)
                t.grad = g
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        for (obj, attr), value in flags.items():
            setattr(obj, attr, value)

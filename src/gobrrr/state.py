"""The state a workload reaches, and how gobrrr leaves it as it found it.

A workload is a callable and its arguments; its state (modules, optimizers, tensors)
hides in closures, bound `self`, arguments and module globals. One walker
(`collect_state`) finds it, for three uses:

- `preserved_state`: diagnose and optimize run the user's workload many times; the
  user's parameters, buffers, gradients, optimizer state, inputs, RNG and backend flags
  are restored on exit.
- `copy_workload`: optimize's independent copies, so remedies never touch the user's
  objects. The callable is rebuilt with every such object deep-copied through one shared
  memo, so a copied optimizer refers to the copied parameters. Functions are rebuilt
  (same code, copied closure cells; a fresh globals dict where a global holds state);
  modules of code, classes and builtins are shared (stateless).
- `snapshot` / `restore`: put a candidate back to its starting state *in place*: after a
  CUDA-graph capture the graph reads and writes those exact tensors, so restoring must
  copy values into them rather than replace them.
"""


from __future__ import annotations

import contextlib
import copy
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gobrrr.settings import restore as restore_settings
from gobrrr.settings import snapshot as snapshot_settings

if TYPE_CHECKING:
    from gobrrr.workload import Workload


__all__ = ["Copied", "copy_workload", "describe", "stateful_ids", "snapshot", "restore",
           "clone_tree", "preserved_state", "reachable_state", "collect_state", "is_state",
           "global_names", "MAX_STATE_DEPTH"]

# ---------------------------------------------------------------- finding state

# Closures of closures of ...: state nested deeper than this is not found (optimize
# reports what stays shared).
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


# ---------------------------------------------------------------- copies

_LIBRARIES = {"torch", "numpy", "transformers", "torchvision", "functools", "builtins",
              "math", "operator"}


@dataclass
class Copied:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    modules: list[Any]
    optimizers: list[Any]
    tensors: list[Any]


class _Copier:
    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}
        self.globals_map: dict[int, dict[str, Any]] = {}

    def copy(self, obj: Any, depth: int = 0) -> Any:
        if id(obj) in self.memo:
            return self.memo[id(obj)]
        if depth > MAX_STATE_DEPTH:
            return obj
        if isinstance(obj, types.FunctionType):
            return self._function(obj, depth)
        if isinstance(obj, types.MethodType):
            out = types.MethodType(self.copy(obj.__func__, depth + 1),
                                   self.copy(obj.__self__, depth + 1))
            self.memo[id(obj)] = out
            return out
        if is_state(obj):
            return copy.deepcopy(obj, self.memo)
        if isinstance(obj, (list, tuple)):
            items = [self.copy(x, depth + 1) for x in obj]
            return type(obj)(items) if not hasattr(obj, "_fields") else type(obj)(*items)
        if isinstance(obj, dict):
            return {k: self.copy(v, depth + 1) for k, v in obj.items()}
        if isinstance(obj, (types.ModuleType, type, types.BuiltinFunctionType, str, bytes,
                            int, float, bool, complex, type(None))) or callable(obj) and \
                not hasattr(obj, "__dict__"):
            return obj
        try:  # any other object (a trainer holding a model): deep-copy it whole
            return copy.deepcopy(obj, self.memo)
        except Exception:  # noqa: BLE001 - uncopyable objects stay shared, reported later
            return obj

    def _function(self, fn: types.FunctionType, depth: int) -> Any:
        if not fn.__closure__ and (fn.__module__ or "").split(".")[0] in _LIBRARIES:
            return fn  # a library function without captured state: nothing to copy
        new_globals = fn.__globals__
        stateful = [n for n in global_names(fn.__code__)
                    if n in fn.__globals__ and (is_state(fn.__globals__[n]) or (
                        isinstance(fn.__globals__[n], types.FunctionType)
                        and fn.__globals__[n].__globals__ is fn.__globals__
                        and fn.__globals__[n] is not fn))]
        if stateful:
            # one fresh globals dict per module dict, shared by the functions copied from
            # it, holding copies of the state they name
            key = id(fn.__globals__)
            if key not in self.globals_map:
                self.globals_map[key] = dict(fn.__globals__)
            new_globals = self.globals_map[key]
        cells = None
        if fn.__closure__:
            cells = tuple(types.CellType() for _ in fn.__closure__)
        out = types.FunctionType(fn.__code__, new_globals, fn.__name__, fn.__defaults__, cells)
        out.__kwdefaults__ = fn.__kwdefaults__
        out.__qualname__ = fn.__qualname__
        out.__dict__.update(fn.__dict__)
        self.memo[id(fn)] = out  # before recursing: closures may refer back to fn
        if fn.__closure__ and cells:
            for old, new in zip(fn.__closure__, cells, strict=True):
                try:
                    new.cell_contents = self.copy(old.cell_contents, depth + 1)
                except ValueError:  # an empty cell (a name assigned later)
                    pass
        for n in stateful:
            if new_globals.get(n) is fn.__globals__[n]:
                new_globals[n] = self.copy(fn.__globals__[n], depth + 1)
        return out


def stateful_ids(fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> set[int]:
    return {id(o) for o in collect_state([fn, list(args), kwargs])}


def describe(fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Copied:
    """The workload with the modules, optimizers and tensors it reaches (no copying)."""
    mods, opts, tens = reachable_state(fn, args, kwargs)
    return Copied(fn, args, kwargs, mods, opts, tens)


def copy_workload(fn: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Copied:
    """An independent copy of `fn(*args, **kwargs)` and the state it reaches."""
    c = _Copier()
    new_fn = c.copy(fn)
    new_args = tuple(c.copy(a) for a in args)
    new_kwargs = {k: c.copy(v) for k, v in kwargs.items()}
    return describe(new_fn, new_args, new_kwargs)


# ------------------------------------------------------------------ in-place snapshots


def snapshot(modules: list[Any], optimizers: list[Any], tensors: list[Any]) -> list[Any]:
    """(tensor, saved value) pairs for every parameter, buffer, gradient, optimizer
    state entry and input tensor; plain values for non-tensor optimizer state."""
    import torch

    saved: list[Any] = []
    with torch.no_grad():
        for m in modules:
            for t in [*m.parameters(), *m.buffers()]:
                saved.append(("t", t, t.detach().clone()))
                if t.grad is not None:
                    saved.append(("g", t, t.grad.detach().clone()))
        for o in optimizers:
            for state in o.state.values():
                for k, v in state.items():
                    saved.append(("s", state, k, v.detach().clone() if
                                  isinstance(v, torch.Tensor) else copy.deepcopy(v)))
        for t in tensors:
            saved.append(("t", t, t.detach().clone()))
    return saved


def restore(saved: list[Any]) -> None:
    """Copy the snapshot back into the same tensors (addresses unchanged)."""
    import torch

    with torch.no_grad():
        for entry in saved:
            if entry[0] == "t":
                entry[1].copy_(entry[2])
            elif entry[0] == "g":
                if entry[1].grad is not None:
                    entry[1].grad.copy_(entry[2])
            else:
                _, state, k, v = entry
                cur = state.get(k)
                if isinstance(cur, torch.Tensor) and isinstance(v, torch.Tensor):
                    cur.copy_(v)
                else:
                    state[k] = v


def clone_tree(out: Any) -> Any:
    """Detached clones of every tensor in an output (a CUDA graph's static output is
    overwritten by the next replay; a workload may return a buffer it reuses)."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, out)


# ---------------------------------------------------------------- preserving the user's state


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
    settings = snapshot_settings()
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
        restore_settings(settings)

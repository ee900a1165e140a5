"""Independent copies of a workload, so remedies never touch the user's objects.

A workload is a callable and its arguments; its state (modules, optimizers, tensors)
hides in closures, bound `self`, arguments and module globals. `copy_callable` rebuilds
the callable with every such object deep-copied through one shared memo, so a copied
optimizer refers to the copied parameters (deepcopy maps them through the memo).
Functions are rebuilt (same code, copied closure cells; a fresh globals dict where a
global holds state); modules of code, classes and builtins are shared (stateless).

`snapshot` / `restore` put a candidate back to its starting state *in place*: after a
CUDA-graph capture the graph reads and writes those exact tensors, so restoring must
copy values into them rather than replace them.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Copied", "copy_workload", "describe", "stateful_ids", "snapshot", "restore",
           "clone_tree"]

_LIBRARIES = {"torch", "numpy", "transformers", "torchvision", "functools", "builtins",
              "math", "operator"}
_MAX_DEPTH = 6  # closures of closures of ...: deeper nesting is shared (and reported)


@dataclass
class Copied:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    modules: list[Any]
    optimizers: list[Any]
    tensors: list[Any]


def _is_state(obj: Any) -> bool:
    import torch

    return isinstance(obj, (torch.nn.Module, torch.optim.Optimizer, torch.Tensor))


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # lambdas and inner functions
            names |= _global_names(const)
    return names


class _Copier:
    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}
        self.globals_map: dict[int, dict[str, Any]] = {}

    def copy(self, obj: Any, depth: int = 0) -> Any:
        if id(obj) in self.memo:
            return self.memo[id(obj)]
        if depth > _MAX_DEPTH:
            return obj
        if isinstance(obj, types.FunctionType):
            return self._function(obj, depth)
        if isinstance(obj, types.MethodType):
            out = types.MethodType(self.copy(obj.__func__, depth + 1),
                                   self.copy(obj.__self__, depth + 1))
            self.memo[id(obj)] = out
            return out
        if _is_state(obj):
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
        stateful = [n for n in _global_names(fn.__code__)
                    if n in fn.__globals__ and (_is_state(fn.__globals__[n]) or (
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


def _collect(root: Any, depth: int = 0, seen: set[int] | None = None) -> list[Any]:
    """Modules, optimizers and tensors reachable from `root` (closures, bound self,
    containers, globals the code names), without copying."""
    seen = set() if seen is None else seen
    out: list[Any] = []
    if id(root) in seen or depth > _MAX_DEPTH:
        return out
    seen.add(id(root))
    if _is_state(root):
        out.append(root)
        return out
    children: list[Any] = []
    if isinstance(root, types.FunctionType):
        children += [c.cell_contents for c in root.__closure__ or ()
                     if _cell_full(c)]
        children += [root.__globals__[n] for n in _global_names(root.__code__)
                     if n in root.__globals__ and (_is_state(root.__globals__[n]) or
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
        out += _collect(c, depth + 1, seen)
    return out


def _cell_full(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - raises ValueError on an empty cell
    except ValueError:
        return False
    return True


def stateful_ids(fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> set[int]:
    return {id(o) for o in _collect([fn, list(args), kwargs])}


def describe(fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Copied:
    """The workload with the modules, optimizers and tensors it reaches (no copying)."""
    import torch

    found = _collect([fn, list(args), kwargs])
    mods = [o for o in found if isinstance(o, torch.nn.Module)]
    opts = [o for o in found if isinstance(o, torch.optim.Optimizer)]
    tens = [o for o in found if isinstance(o, torch.Tensor)]
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

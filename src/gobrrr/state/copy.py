"""Independent copies of a workload and putting a copy back in place.

- `copy_workload`: optimize's independent copies, so remedies never touch the user's
  objects. The callable is rebuilt with every such object deep-copied through one shared
  memo, so a copied optimizer refers to the copied parameters. Functions are rebuilt
  (same code, copied closure cells; a fresh globals dict where a global holds state);
  modules of code, classes and builtins are shared (stateless).
- `snapshot` / `restore`: put a candidate back to its starting state *in place*: after a
  CUDA-graph capture the graph reads and writes those exact tensors, so restoring must
  copy values into them rather than replace them.
- `plain_state` / `put_back`: the plain attributes of optimizers and LR schedulers.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gobrrr.state.reach import (
    MAX_STATE_DEPTH,
    STATELESS,
    collect_state,
    global_names,
    is_state,
    reachable_state,
    walk,
)

if TYPE_CHECKING:
    pass


__all__ = ["Copied", "copy_workload", "describe", "stateful_ids", "snapshot", "restore",
           "clone_tree", "plain_state", "put_back"]

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
        if isinstance(obj, functools.partial):
            part = functools.partial(self.copy(obj.func, depth + 1),
                                    *[self.copy(a, depth + 1) for a in obj.args],
                                    **{k: self.copy(v, depth + 1)
                                       for k, v in obj.keywords.items()})
            self.memo[id(obj)] = part
            return part
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
        g = fn.__globals__
        stateful = [n for n in sorted(global_names(fn.__code__))
                    if n in g and not isinstance(g[n], STATELESS) and g[n] is not fn
                    and (isinstance(g[n], types.FunctionType) and g[n].__globals__ is g
                         or _reaches_state(g[n]))]
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


def _reaches_state(obj: Any) -> bool:
    """Whether a global's value holds modules, optimizers or tensors (a trainer object, a
    dict of model and optimizer): a copy must then copy it."""
    r = walk(obj, max_depth=4)
    return bool(r.modules or r.optimizers or r.tensors)


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
    for new in list(c.memo.values()):
        _rewrap_lr_scheduler_step(new)
    return describe(new_fn, new_args, new_kwargs)


def _rewrap_lr_scheduler_step(opt: Any) -> None:
    """An LR scheduler replaces its optimizer's `step` with a wrapper on the instance that
    calls the optimizer through a weak reference (torch.optim.lr_scheduler, to warn when
    the scheduler steps first). A deep copy keeps that function as it is, so the copied
    optimizer's step() would step the *user's* optimizer: it gets a wrapper of its own."""
    import weakref

    import torch

    step = getattr(opt, "__dict__", {}).get("step")
    if not (isinstance(opt, torch.optim.Optimizer)
            and getattr(step, "_wrapped_by_lr_sched", False)):
        return
    func = type(opt).step
    ref = weakref.ref(opt)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        o = ref()
        o._opt_called = True  # type: ignore[union-attr]
        return func.__get__(o, o.__class__)(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    opt.step = wrapper  # type: ignore[method-assign]


def plain_state(c: Copied) -> list[tuple[dict[Any, Any], dict[Any, Any]]]:
    """A copy's state outside its tensors, to put back after warm calls (`put_back`): the
    attributes of the objects it reaches (an LR scheduler's step count and last LR, a
    trainer's counters) and its optimizers' param_groups (the LR a scheduler writes).
    Without it a candidate warmed 3 steps ahead of the reference is compared at another
    point of the LR schedule: every remedy of a GPT-2 trainer under DDP was rejected,
    static_graph included, and on one process every exact optimizer remedy of a step
    with a LambdaLR (error 0.0159 against 1e-4). Modules' own attributes stay as the warm
    calls left them: DDP's flags follow its C++ reducer's state (putting them back broke
    static_graph's reducer: "expect_autograd_hooks_ INTERNAL ASSERT FAILED")."""
    reach = walk(c.fn, c.args, c.kwargs)
    dicts = [vars(o) for o in reach.objects] + [g for o in c.optimizers
                                                 for g in o.param_groups]
    return [(d, dict(d)) for d in dicts]


def put_back(saved: list[tuple[dict[Any, Any], dict[Any, Any]]]) -> None:
    """The attributes `plain_state` saved, as they were (shallow: rebound values)."""
    for d, items in saved:
        for k in [k for k in d if k not in items]:
            del d[k]
        for k, v in items.items():
            if d.get(k) is not v:
                d[k] = v


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



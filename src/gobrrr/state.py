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
import functools
import io
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gobrrr.workload import Workload


__all__ = ["Copied", "copy_workload", "describe", "stateful_ids", "snapshot", "restore",
           "clone_tree", "preserved_state", "preserved_globals", "StateCheck", "Reach",
           "walk", "reachable_state", "collect_state", "is_state", "global_names",
           "plain_state", "put_back", "MAX_STATE_DEPTH"]

# ---------------------------------------------------------------- finding state

# Closures of closures of ...: state nested deeper than this is not found (optimize
# reports what stays shared; diagnose's verification names what it could not restore).
MAX_STATE_DEPTH = 8


def is_state(obj: Any) -> bool:
    import torch

    return isinstance(obj, (torch.nn.Module, torch.optim.Optimizer, torch.Tensor))


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME",
                         "STORE_NAME", "DELETE_NAME"})


@functools.lru_cache(maxsize=4096)
def global_names(code: types.CodeType) -> frozenset[str]:
    """Global names a function's code (and its inner functions and lambdas) uses: the
    names its global loads and stores take, not `co_names` whole, which also holds every
    attribute name: `opt.step()` in a step function would name a global `step` (often the
    step function itself, whose closure then counts as state a copy still shares)."""
    import dis

    names = {str(i.argval) for i in dis.get_instructions(code) if i.opname in _GLOBAL_OPS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return frozenset(names)


def _cell_full(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - raises ValueError on an empty cell
    except ValueError:
        return False
    return True


_MISSING = object()  # a global name the code uses but that is not bound (yet)

@functools.lru_cache(maxsize=512)
def _library_module(name: str | None) -> bool:
    """A module of the standard library or of an installed package (site-packages):
    its globals and objects are the library's, not the user's state (a logger, torch's
    own caches). The user's scripts and notebooks are neither."""
    import sys
    import sysconfig

    if not name or name == "__main__":
        return False
    if name.split(".")[0] in sys.stdlib_module_names:
        return True
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None) or ""
    roots = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
    return any(path.startswith(r) for r in roots if r)


# Values that hold no state of the user's: never descended into.
_STATELESS = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType, str, bytes,
              int, float, bool, complex, type(None), range, slice)


def _is_torch_state(obj: Any) -> bool:
    """torch's stateful objects that hold the user's training state: LR schedulers,
    gradient scalers, and other objects of torch.optim / torch.amp."""
    return type(obj).__module__.split(".")[:2] in (["torch", "optim"], ["torch", "amp"],
                                                    ["torch", "cuda"])


def _is_iterator(obj: Any) -> bool:
    """An object whose position cannot be rewound from outside: generators and iterators
    (a DataLoader's iterator, itertools.count, a file)."""
    if isinstance(obj, types.GeneratorType):
        return True
    try:
        return hasattr(obj, "__next__") and iter(obj) is obj
    except Exception:  # noqa: BLE001 - an object whose __iter__ raises is no iterator
        return False


@dataclass
class Reach:
    """Everything a call can reach that it may change, found once (see `walk`)."""

    modules: list[Any] = field(default_factory=list)
    optimizers: list[Any] = field(default_factory=list)
    tensors: list[Any] = field(default_factory=list)  # outside modules and optimizers
    generators: list[Any] = field(default_factory=list)  # torch.Generator
    objects: list[Any] = field(default_factory=list)  # other objects with a __dict__
    containers: list[Any] = field(default_factory=list)  # mutable list, dict, set
    globals: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    iterators: list[Any] = field(default_factory=list)  # cannot be rewound
    functions: list[Any] = field(default_factory=list)  # the functions it runs through
    cells: list[Any] = field(default_factory=list)  # their closure cells (`nonlocal n`)
    names: dict[int, str] = field(default_factory=dict)  # id -> where it was found

    def name(self, obj: Any) -> str:
        return self.names.get(id(obj), type(obj).__name__)


def walk(fn: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
         max_depth: int = MAX_STATE_DEPTH) -> Reach:
    """What `fn(*args, **kwargs)` can reach: through closures, default values,
    `functools.partial` arguments, bound `self`, the module globals its code names (and,
    recursively, the functions it calls that way), containers (list, tuple, dict, set),
    dataclasses and object attributes, to `max_depth` links. Modules, optimizers and
    tensors end a path (their insides are enumerated when they are snapshotted)."""
    import torch

    reach = Reach()
    seen: set[int] = set()

    def visit(obj: Any, path: str, depth: int) -> None:
        if isinstance(obj, _STATELESS) or id(obj) in seen or depth > max_depth:
            return
        seen.add(id(obj))
        reach.names.setdefault(id(obj), path)
        if isinstance(obj, torch.Tensor):
            reach.tensors.append(obj)
        elif isinstance(obj, torch.nn.Module):
            reach.modules.append(obj)
        elif isinstance(obj, torch.optim.Optimizer):
            reach.optimizers.append(obj)
            for i, group in enumerate(obj.param_groups):  # lr may be a tensor
                for k, v in group.items():
                    if k != "params":
                        visit(v, f"{path}.param_groups[{i}][{k!r}]", depth + 1)
        elif isinstance(obj, torch.Generator):
            reach.generators.append(obj)
        elif isinstance(obj, types.FunctionType):
            reach.functions.append(obj)
            for cell, var in zip(obj.__closure__ or (), obj.__code__.co_freevars,
                                 strict=False):
                reach.cells.append(cell)
                if _cell_full(cell):
                    visit(cell.cell_contents, f"{path}.<closure {var}>", depth + 1)
            if _library_module(obj.__module__):
                return  # torch's or the stdlib's own globals are not the user's state
            for i, d in enumerate(obj.__defaults__ or ()):
                visit(d, f"{path}.<default {i}>", depth + 1)
            for k, d in (obj.__kwdefaults__ or {}).items():
                visit(d, f"{path}.<default {k}>", depth + 1)
            g = obj.__globals__
            for n in sorted(global_names(obj.__code__)):
                value = g.get(n, _MISSING)
                if isinstance(value, (type, types.ModuleType, types.BuiltinFunctionType)):
                    continue  # imports and classes: the step rebinding them is not state
                # every other name the code uses, even an int (a step counter) or one not
                # bound yet (`global X; X = ...`): rebinding it is a change to undo
                reach.globals.append((g, n))
                if value is not _MISSING:
                    visit(value, n, depth + 1)
        elif isinstance(obj, types.MethodType):
            visit(obj.__self__, f"{path}.__self__", depth + 1)
            visit(obj.__func__, path, depth + 1)
        elif isinstance(obj, functools.partial):
            visit(obj.func, f"{path}.func", depth + 1)
            for i, a in enumerate(obj.args):
                visit(a, f"{path}.args[{i}]", depth + 1)
            for k, v in obj.keywords.items():
                visit(v, f"{path}.keywords[{k!r}]", depth + 1)
        elif _is_iterator(obj):
            if not isinstance(obj, io.IOBase):  # a file is not a data position to rewind
                reach.iterators.append(obj)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            if isinstance(obj, (list, set)):
                reach.containers.append(obj)
            for i, x in enumerate(obj):
                visit(x, f"{path}[{i}]", depth + 1)
        elif isinstance(obj, dict):
            reach.containers.append(obj)
            for k, v in list(obj.items()):
                visit(v, f"{path}[{k!r}]", depth + 1)
        elif isinstance(getattr(obj, "__dict__", None), dict):
            if _library_module(type(obj).__module__) and not _is_torch_state(obj):
                return  # a logger, a lock, a library's cache: not the user's state
            reach.objects.append(obj)  # a trainer, an LR scheduler, a GradScaler, ...
            for k, v in list(vars(obj).items()):
                visit(v, f"{path}.{k}", depth + 1)

    visit(fn, getattr(fn, "__name__", type(fn).__name__), 0)
    for i, a in enumerate(args):
        visit(a, f"args[{i}]", 1)
    for k, v in (kwargs or {}).items():
        visit(v, f"kwargs[{k!r}]", 1)
    return reach


def collect_state(root: Any) -> list[Any]:
    """Modules, optimizers and tensors reachable from `root` (see `walk`)."""
    r = walk(root)
    return [*r.modules, *r.optimizers, *r.tensors]


def reachable_state(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                    ) -> tuple[list[Any], list[Any], list[Any]]:
    """(modules, optimizers, tensors) the call `fn(*args, **kwargs)` can reach."""
    r = walk(fn, args, kwargs)
    return r.modules, r.optimizers, r.tensors


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
                    if n in g and not isinstance(g[n], _STATELESS) and g[n] is not fn
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


# ---------------------------------------------------------------- preserving the user's state


@dataclass
class StateCheck:
    """What `preserved_state` saved and put back, and what it could not: filled in when
    the block exits. `warnings` are the loud lines (an object named by where it was
    found); an empty list means every reachable tensor was verified byte for byte."""

    tensors: int = 0
    storages: int = 0
    snapshot_bytes: int = 0
    snapshot_s: float = 0.0
    restore_s: float = 0.0
    snapshot_on: str = ""  # "device" or "host" (device memory was short)
    found: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def _byte_view(t: Any) -> Any:
    """A uint8 tensor over the whole storage of `t` (views share one storage: saved once).
    Copying into it changes the user's tensor in place and leaves its autograd version
    counter alone."""
    import torch

    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _storage_key(t: Any) -> tuple[str, int]:
    return (str(t.device), t.untyped_storage().data_ptr())


def _equal_bytes(live: Any, saved: Any, chunk: int = 2**28) -> bool:
    """Byte equality (NaN-safe), in chunks when the copy is on the host."""
    import torch

    if live.numel() != saved.numel():
        return False
    if live.device == saved.device:
        return bool(torch.equal(live, saved))
    return all(torch.equal(live[i:i + chunk].cpu(), saved[i:i + chunk])
               for i in range(0, live.numel(), chunk))


class _Guard:
    """The snapshot behind `preserved_state`: every reachable tensor's storage (copied),
    and, by identity, every object, container, global, gradient and optimizer entry."""

    def __init__(self, reach: Reach) -> None:
        import torch

        self.reach = reach
        self.check = StateCheck()
        named: list[tuple[str, Any]] = []
        self.grads: list[tuple[Any, Any]] = []
        self.module_dicts: list[tuple[Any, dict[str, Any]]] = []
        for m in reach.modules:
            base = reach.name(m)
            named += [(f"{base}.{n}", p) for n, p in m.named_parameters()]
            named += [(f"{base}.{n}", b) for n, b in m.named_buffers()]
            for sub in m.modules():  # training flags, counters, swapped parameters
                self.module_dicts.append((sub, {
                    k: (dict(v) if k in ("_parameters", "_buffers", "_modules") else v)
                    for k, v in vars(sub).items()
                    if k in ("_parameters", "_buffers", "_modules") or
                    isinstance(v, (int, float, bool, str, type(None)))}))
        self.optim: list[tuple[Any, dict[Any, tuple[dict[str, Any], dict[str, Any]]],
                               list[Any], list[tuple[dict[str, Any], dict[str, Any],
                                                     list[Any]]]]] = []
        for o in reach.optimizers:
            oname = reach.name(o)
            for i, (_p, st) in enumerate(o.state.items()):
                named += [(f"{oname}.state[{i}][{k!r}]", v) for k, v in st.items()
                          if isinstance(v, torch.Tensor)]
            self.optim.append((o, {p: (d, dict(d)) for p, d in o.state.items()},
                               list(o.param_groups),
                               [(g, dict(g), list(g["params"])) for g in o.param_groups]))
        named += [(reach.name(t), t) for t in reach.tensors]
        for name, t in list(named):
            if isinstance(t, torch.Tensor) and t.is_leaf:
                g = t.grad
                self.grads.append((t, g))
                if g is not None:
                    named.append((f"{name}.grad", g))
        self.objects = [(o, dict(vars(o))) for o in [*reach.objects, *reach.optimizers]]
        self.containers = [(c, list(c) if isinstance(c, list) else
                            set(c) if isinstance(c, set) else dict(c))
                           for c in reach.containers]
        self.globals = [(g, n, g.get(n, _MISSING)) for g, n in reach.globals]
        self.cells = [(c, c.cell_contents if _cell_full(c) else _MISSING)
                      for c in reach.cells]
        self.generators = [(gen, gen.get_state()) for gen in reach.generators]
        self.iterators = [(it, self._position(it)) for it in reach.iterators]
        self.rng = _global_rng_state()
        self.storages = self._save_storages(named)
        self.check.found = {"modules": len(reach.modules),
                            "optimizers": len(reach.optimizers),
                            "objects": len(reach.objects),
                            "containers": len(reach.containers),
                            "globals": len(reach.globals),
                            "closure_cells": len(reach.cells),
                            "generators": len(reach.generators),
                            "iterators": len(reach.iterators)}

    @staticmethod
    def _position(it: Any) -> Any:
        """A generator's position: its instruction and the identity of its locals (a
        generator suspended at one `yield` keeps its instruction while its loop variable
        moves on). None for other iterators: their position cannot be read."""
        frame = getattr(it, "gi_frame", None)
        if frame is None:
            return None
        return frame.f_lasti, tuple((k, id(v)) for k, v in frame.f_locals.items())

    def _save_storages(self, named: list[tuple[str, Any]]) -> list[tuple[list[str], Any, Any]]:
        import torch

        by_key: dict[tuple[str, int], tuple[list[str], Any]] = {}
        for name, t in named:
            if not isinstance(t, torch.Tensor):
                continue
            try:
                if hasattr(t, "to_local") and hasattr(t, "device_mesh"):
                    # a DTensor (FSDP2's sharded parameters): it has no storage of its
                    # own; its local shard is what this rank holds and restores
                    with torch.no_grad():
                        t = t.to_local()
                key = _storage_key(t)
                if key in by_key:
                    by_key[key][0].append(name)
                elif t.untyped_storage().nbytes() > 0:
                    by_key[key] = ([name], _byte_view(t))
            except (RuntimeError, NotImplementedError) as exc:  # sparse, meta, subclasses
                self.check.warnings.append(f"{name} could not be snapshotted "
                                           f"({type(t).__name__}: {str(exc)[:80]}); "
                                           "gobrrr cannot restore it if the workload "
                                           "changes it")
        total = sum(v.numel() for _, v in by_key.values())
        self.check.tensors = len(named)
        self.check.storages = len(by_key)
        self.check.snapshot_bytes = total
        host = False
        on_cuda = [v for _, v in by_key.values() if v.device.type == "cuda"]
        if on_cuda:
            free_b, _ = torch.cuda.mem_get_info()
            # keep room for the workload itself: copies on the device only while they
            # take under half of what is free
            host = sum(v.numel() for v in on_cuda) > free_b / 2
        self.check.snapshot_on = "host" if host else "device"
        with torch.no_grad():
            return [(names, live, live.to("cpu", copy=True) if host else live.clone())
                    for names, live in by_key.values()]

    def restore(self) -> None:
        import torch

        warn = self.check.warnings
        with torch.no_grad():
            for names, live, saved in self.storages:
                if live.untyped_storage().nbytes() != saved.numel():
                    warn.append(f"{names[0]} changed size during gobrrr's runs: not "
                                "restored")
                    continue
                live.copy_(saved)
        for t, g in self.grads:
            if t.grad is not g:
                t.grad = g
        for sub, saved_d in self.module_dicts:
            for k, v in saved_d.items():
                cur = sub.__dict__.get(k, _MISSING)
                if isinstance(v, dict) and isinstance(cur, dict):
                    _restore_mapping(cur, v)
                elif cur is not v:
                    sub.__dict__[k] = v
        for o, state, groups, group_items in self.optim:
            for p in [p for p in o.state if p not in state]:
                del o.state[p]
            for p, (d, items) in state.items():
                _restore_mapping(d, items)
                o.state[p] = d
            o.param_groups[:] = groups
            for g, items, params in group_items:
                _restore_mapping(g, items)
                g["params"][:] = params
        for obj, saved_vars in self.objects:
            try:
                _restore_mapping(vars(obj), saved_vars)
            except TypeError as exc:  # a read-only __dict__
                warn.append(f"{self.reach.name(obj)} could not be restored: {exc}")
        for c, saved_c in self.containers:
            if isinstance(c, list):
                if len(c) != len(saved_c) or any(a is not b for a, b in zip(c, saved_c,
                                                                             strict=False)):
                    c[:] = saved_c
            elif isinstance(c, set):
                if c != saved_c:
                    c.clear()
                    c.update(saved_c)
            elif isinstance(saved_c, dict):
                _restore_mapping(c, saved_c)
        for g, n, value in self.globals:
            if value is _MISSING:
                g.pop(n, None)
            elif g.get(n, _MISSING) is not value:
                g[n] = value
        for cell, value in self.cells:  # `nonlocal n; n += 1`: the same object again
            if value is not _MISSING and (not _cell_full(cell) or
                                          cell.cell_contents is not value):
                cell.cell_contents = value
        for gen, st in self.generators:
            gen.set_state(st)
        _set_global_rng_state(self.rng)
        for it, pos in self.iterators:
            moved = pos is not None and self._position(it) != pos
            warn.append(f"{self.reach.name(it)} ({type(it).__name__}) cannot be rewound: "
                        + ("gobrrr's calls advanced it" if moved else
                           "if the workload advances it, gobrrr's calls did too"))

    def verify(self) -> None:
        """Every saved storage equals its snapshot byte for byte, after the restore."""
        for names, live, saved in self.storages:
            if live.untyped_storage().nbytes() == saved.numel() and \
                    not _equal_bytes(live, saved):
                self.check.warnings.append(f"{names[0]} differs from before gobrrr's "
                                           "runs after the restore")


def _restore_mapping(cur: dict[Any, Any], saved: dict[Any, Any]) -> None:
    """`cur` holds exactly `saved`'s keys and the very same values again, in place."""
    for k in [k for k in cur if k not in saved]:
        del cur[k]
    for k, v in saved.items():
        if cur.get(k, _MISSING) is not v:
            cur[k] = v


def _global_rng_state() -> dict[str, Any]:
    """torch's CPU and CUDA generators, Python's `random`, and numpy's global one when
    numpy is already imported (never imported just to save it)."""
    import random
    import sys

    import torch

    st: dict[str, Any] = {"torch": torch.get_rng_state(), "random": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        st["numpy"] = np.random.get_state()
    return st


def _set_global_rng_state(st: dict[str, Any]) -> None:
    import random
    import sys

    import torch

    torch.set_rng_state(st["torch"])
    random.setstate(st["random"])
    if "cuda" in st:
        torch.cuda.set_rng_state_all(st["cuda"])
    if "numpy" in st:
        sys.modules["numpy"].random.set_state(st["numpy"])


@contextlib.contextmanager
def preserved_globals() -> Iterator[None]:
    """The global RNGs and gobrrr.settings only: for gobrrr's own work (calibration) that
    never runs the user's workload."""
    from gobrrr.settings import preserved

    rng = _global_rng_state()
    try:
        with preserved():
            yield
    finally:
        _set_global_rng_state(rng)


@contextlib.contextmanager
def preserved_state(w: Workload) -> Iterator[StateCheck]:
    """Run gobrrr's many calls of the workload and leave no trace on the user's things.

    Everything the call reaches (`walk`) is saved on entry and put back *in place* on
    exit: every tensor's values (parameters, buffers, gradients, optimizer and scheduler
    state, inputs, tensors in containers and objects) copied back into the same storage;
    gradients, optimizer state entries, param_groups, object attributes, container
    contents and module globals back to the very same objects; torch.Generators, the
    global RNGs and gobrrr.settings. Then every saved tensor is compared byte for byte
    with its snapshot. What could not be restored or rewound (a data iterator) is named
    in `StateCheck.warnings`, the loud lines the report shows."""
    import time

    from gobrrr.settings import restore as restore_settings
    from gobrrr.settings import snapshot as snapshot_settings

    t0 = time.perf_counter()
    guard = _Guard(walk(w.fn, w.args, w.kwargs))
    settings = snapshot_settings()
    guard.check.snapshot_s = time.perf_counter() - t0
    try:
        yield guard.check
    finally:
        t1 = time.perf_counter()
        guard.restore()
        restore_settings(settings)
        guard.verify()
        guard.check.restore_s = time.perf_counter() - t1

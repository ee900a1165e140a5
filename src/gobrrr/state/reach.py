"""The state a workload reaches: the modules, optimizers and tensors hiding in closures,
bound `self`, arguments, containers, object attributes and the module globals its code
names. One walker (`walk`) finds them for every use: preserving the user's state
(guard.py), independent copies (copy.py), remedies that must find a DDP or FSDP2 wrapper.
"""


from __future__ import annotations

import collections
import functools
import io
import sys
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


__all__ = ["Reach", "walk", "reachable_state", "collect_state", "is_state", "global_names",
           "cell_full", "slot_names", "MISSING", "STATELESS", "MAX_STATE_DEPTH"]

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


def cell_full(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - raises ValueError on an empty cell
    except ValueError:
        return False
    return True


MISSING = object()  # a global name the code uses but that is not bound (yet)

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
STATELESS = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType, str, bytes,
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
    containers: list[Any] = field(default_factory=list)  # mutable list, dict, set, deque
    globals: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    iterators: list[Any] = field(default_factory=list)  # cannot be rewound
    functions: list[Any] = field(default_factory=list)  # the functions it runs through
    cells: list[Any] = field(default_factory=list)  # their closure cells (`nonlocal n`)
    slotted: list[Any] = field(default_factory=list)  # objects with __slots__ fields
    arrays: list[Any] = field(default_factory=list)  # numpy arrays (changed in place)
    # where the walk stopped at MAX_STATE_DEPTH with something there: not checked
    too_deep: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)  # id -> where it was found

    def name(self, obj: Any) -> str:
        return self.names.get(id(obj), type(obj).__name__)


def slot_names(obj: Any) -> list[str]:
    """The `__slots__` fields of `obj`'s class and its bases (`__dict__` and
    `__weakref__` slots excluded: they hold no field of their own)."""
    names: list[str] = []
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for n in (slots,) if isinstance(slots, str) else slots:
            if n not in ("__dict__", "__weakref__") and n not in names:
                names.append(n)
    return names


@functools.lru_cache(maxsize=1)
def _module_internals() -> frozenset[str]:
    """The attributes torch.nn.Module keeps for itself (parameters, buffers, children,
    hooks, flags): a module's other attributes are its author's."""
    import torch

    return frozenset(vars(torch.nn.Module()))


def walk(fn: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
         max_depth: int = MAX_STATE_DEPTH) -> Reach:
    """What `fn(*args, **kwargs)` can reach: through closures, default values,
    `functools.partial` arguments, bound `self`, the module globals its code names (and,
    recursively, the functions it calls that way), containers (list, tuple, dict, set),
    dataclasses, object attributes and `__slots__` fields, to `max_depth` links.
    Modules, optimizers and tensors end a path (their insides are enumerated when they
    are snapshotted), except the attributes a module's author added (`self.calls`,
    `self.cache = {}`, a tensor that is not a buffer, a torch.Generator), which are
    walked on for every module whose class is not a library's."""
    import torch

    reach = Reach()
    seen: set[int] = set()
    np = sys.modules.get("numpy")  # never imported just to look for its arrays

    def visit(obj: Any, path: str, depth: int) -> None:
        if isinstance(obj, STATELESS) or id(obj) in seen:
            return
        if depth > max_depth:
            if len(reach.too_deep) < 8:
                reach.too_deep.append(path)
            return
        seen.add(id(obj))
        reach.names.setdefault(id(obj), path)
        if isinstance(obj, torch.Tensor):
            reach.tensors.append(obj)
        elif isinstance(obj, torch.nn.Module):
            reach.modules.append(obj)
            internals = _module_internals()
            for name, sub in obj.named_modules():
                if _library_module(type(sub).__module__):
                    continue  # torch's and a library's modules keep state in tensors
                where = f"{path}.{name}" if name else path
                for k, v in list(vars(sub).items()):
                    if k not in internals:
                        visit(v, f"{where}.{k}", depth + 1)
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
                if cell_full(cell):
                    visit(cell.cell_contents, f"{path}.<closure {var}>", depth + 1)
            if _library_module(obj.__module__):
                return  # torch's or the stdlib's own globals are not the user's state
            for i, d in enumerate(obj.__defaults__ or ()):
                visit(d, f"{path}.<default {i}>", depth + 1)
            for k, d in (obj.__kwdefaults__ or {}).items():
                visit(d, f"{path}.<default {k}>", depth + 1)
            g = obj.__globals__
            for n in sorted(global_names(obj.__code__)):
                value = g.get(n, MISSING)
                if isinstance(value, (type, types.ModuleType, types.BuiltinFunctionType)):
                    continue  # imports and classes: the step rebinding them is not state
                # every other name the code uses, even an int (a step counter) or one not
                # bound yet (`global X; X = ...`): rebinding it is a change to undo
                reach.globals.append((g, n))
                if value is not MISSING:
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
        elif isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
            if isinstance(obj, (list, set, collections.deque)):
                reach.containers.append(obj)
            for i, x in enumerate(obj):
                visit(x, f"{path}[{i}]", depth + 1)
        elif isinstance(obj, dict):
            reach.containers.append(obj)
            for k, v in list(obj.items()):
                visit(v, f"{path}[{k!r}]", depth + 1)
        elif np is not None and isinstance(obj, np.ndarray):
            reach.arrays.append(obj)
        elif isinstance(getattr(obj, "__dict__", None), dict) or slot_names(obj):
            if _library_module(type(obj).__module__) and not _is_torch_state(obj):
                return  # a logger, a lock, a library's cache: not the user's state
            if isinstance(getattr(obj, "__dict__", None), dict):
                reach.objects.append(obj)  # a trainer, an LR scheduler, a GradScaler, ...
                for k, v in list(vars(obj).items()):
                    visit(v, f"{path}.{k}", depth + 1)
            slots = slot_names(obj)
            if slots:
                reach.slotted.append(obj)
                for k in slots:
                    v = getattr(obj, k, MISSING)
                    if v is not MISSING:
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



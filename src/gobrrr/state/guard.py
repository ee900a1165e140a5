"""Leaving the user's state as gobrrr found it: diagnose and optimize run the user's
workload many times; `preserved_state` saves the user's parameters, buffers, gradients,
optimizer state, inputs, RNG and backend flags and restores them on exit, verifying every
reachable tensor byte for byte (StateCheck says what it could not restore).
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gobrrr.settings import preserved
from gobrrr.settings import restore as restore_settings
from gobrrr.settings import snapshot as snapshot_settings
from gobrrr.state.reach import (
    MAX_STATE_DEPTH,
    MISSING,
    Reach,
    cell_full,
    slot_names,
    walk,
)

if TYPE_CHECKING:
    from gobrrr.workload import Workload




__all__ = ["StateCheck", "preserved_state", "preserved_globals"]


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
    snapshot_on: str = ""  # "device" or "host" (device memory was short, or asked for)
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

    def __init__(self, reach: Reach, snapshot_on: str | None = None) -> None:
        import torch

        self.reach = reach
        self.snapshot_on = snapshot_on
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
        self.containers = [(c, list(c) if isinstance(c, (list, collections.deque)) else
                            set(c) if isinstance(c, set) else dict(c))
                           for c in reach.containers]
        self.globals = [(g, n, g.get(n, MISSING)) for g, n in reach.globals]
        self.cells = [(c, c.cell_contents if cell_full(c) else MISSING)
                      for c in reach.cells]
        self.slots = [(o, {k: getattr(o, k, MISSING) for k in slot_names(o)})
                      for o in reach.slotted]
        self.arrays = [(a, a.copy()) for a in reach.arrays]
        self.generators = [(gen, gen.get_state()) for gen in reach.generators]
        if reach.too_deep:
            self.check.warnings.append(
                f"state nested deeper than {MAX_STATE_DEPTH} links from the workload was "
                f"not checked ({', '.join(reach.too_deep[:3])}"
                + (", ..." if len(reach.too_deep) > 3 else "") + "): gobrrr cannot "
                "restore it if the workload changes it")
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
                            "slotted_objects": len(reach.slotted),
                            "arrays": len(reach.arrays),
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
        host = self.snapshot_on == "host"
        on_cuda = [v for _, v in by_key.values() if v.device.type == "cuda"]
        if on_cuda and self.snapshot_on is None:
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
                cur = sub.__dict__.get(k, MISSING)
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
            if isinstance(c, collections.deque):
                if len(c) != len(saved_c) or any(a is not b for a, b in zip(c, saved_c,
                                                                             strict=False)):
                    c.clear()
                    c.extend(saved_c)
            elif isinstance(c, list):
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
            if value is MISSING:
                g.pop(n, None)
            elif g.get(n, MISSING) is not value:
                g[n] = value
        for cell, value in self.cells:  # `nonlocal n; n += 1`: the same object again
            if value is not MISSING and (not cell_full(cell) or
                                          cell.cell_contents is not value):
                cell.cell_contents = value
        for obj, fields in self.slots:
            for k, v in fields.items():
                try:
                    if v is MISSING:
                        if hasattr(obj, k):
                            delattr(obj, k)
                    elif getattr(obj, k, MISSING) is not v:
                        setattr(obj, k, v)
                except (AttributeError, TypeError) as exc:  # a read-only slot
                    warn.append(f"{self.reach.name(obj)}.{k} could not be restored: {exc}")
        for arr, saved_a in self.arrays:
            try:
                if arr.shape == saved_a.shape and arr.dtype == saved_a.dtype:
                    arr[...] = saved_a
                else:
                    warn.append(f"{self.reach.name(arr)} (numpy array) changed shape or "
                                "dtype during gobrrr's runs: not restored")
            except ValueError as exc:  # a read-only array
                warn.append(f"{self.reach.name(arr)} could not be restored: {exc}")
        for gen, st in self.generators:
            gen.set_state(st)
        _set_global_rng_state(self.rng)
        for it, pos in self.iterators:
            moved = pos is not None and self._position(it) != pos
            warn.append(f"{self.reach.name(it)} ({type(it).__name__}) cannot be rewound: "
                        + ("gobrrr's calls advanced it" if moved else
                           "if the workload advances it, gobrrr's calls did too"))

    def verify(self) -> None:
        """Every saved storage and numpy array equals its snapshot byte for byte, after
        the restore."""
        for names, live, saved in self.storages:
            if live.untyped_storage().nbytes() == saved.numel() and \
                    not _equal_bytes(live, saved):
                self.check.warnings.append(f"{names[0]} differs from before gobrrr's "
                                           "runs after the restore")
        for arr, saved_a in self.arrays:
            if arr.shape == saved_a.shape and arr.tobytes() != saved_a.tobytes():
                self.check.warnings.append(f"{self.reach.name(arr)} differs from before "
                                           "gobrrr's runs after the restore")


def _restore_mapping(cur: dict[Any, Any], saved: dict[Any, Any]) -> None:
    """`cur` holds exactly `saved`'s keys and the very same values again, in place."""
    for k in [k for k in cur if k not in saved]:
        del cur[k]
    for k, v in saved.items():
        if cur.get(k, MISSING) is not v:
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

    rng = _global_rng_state()
    try:
        with preserved():
            yield
    finally:
        _set_global_rng_state(rng)


SNAPSHOT_ON = (None, "host")


@contextlib.contextmanager
def preserved_state(w: Workload, snapshot_on: str | None = None) -> Iterator[StateCheck]:
    """Run gobrrr's many calls of the workload and leave no trace on the user's things.

    Everything the call reaches (`walk`) is saved on entry and put back *in place* on
    exit: every tensor's values (parameters, buffers, gradients, optimizer and scheduler
    state, inputs, tensors in containers and objects) copied back into the same storage;
    gradients, optimizer state entries, param_groups, object attributes, container
    contents and module globals back to the very same objects; torch.Generators, the
    global RNGs and gobrrr.settings. Then every saved tensor is compared byte for byte
    with its snapshot. What could not be restored or rewound (a data iterator) is named
    in `StateCheck.warnings`, the loud lines the report shows.

    `snapshot_on`: None, the copies on the device while they take under half of its
    free memory (restoring is then a device copy), else on the host; "host", on the
    host always: a memory measurement's (memory.py), whose allocator figures and room
    must be the workload's own, not the workload's plus gobrrr's copy of it."""
    import time

    if snapshot_on not in SNAPSHOT_ON:
        raise ValueError(f"snapshot_on: one of {SNAPSHOT_ON}, not {snapshot_on!r}")

    t0 = time.perf_counter()
    guard = _Guard(walk(w.fn, w.args, w.kwargs), snapshot_on)
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

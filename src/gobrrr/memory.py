"""What uses the memory of one step (issue 26, first part): the peak bytes of live tensor
storages during one call and, at the peak, their bytes by category (parameters,
gradients, optimizer state, activations, temporaries, buffers, other) and each module's
activations (what its forward left alive for the backward), from torch's own MemTracker
(torch.distributed._tools.mem_tracker: a dispatch mode that follows every storage;
its tests hold its peak within 10% of the allocator's). On CUDA the allocator's own
`max_memory_allocated` and reserved bytes come beside it, and fragmentation is said when
reserved bytes far exceed allocated ones.

One warm call first, unmeasured (the optimizer creates its state on its first step, and
that state is a category of its own, not a temporary of the step), then one measured
call. The user's state (parameters, gradients, optimizer state, RNG) is restored after,
as doctor restores it, from a copy kept on the host (preserved_state's
snapshot_on="host"): a copy on the device would be in the allocator's
`max_memory_allocated` (on the H200, 0.50 GB of GPT-2 small's 0.57 GB gap to
MemTracker's peak, 2.20 GB of TinyLlama's 2.24 GB) and would take the room a batch
that fits is looking for.

Beside the peak, the largest single storage an op allocated in the measured call
(`largest_allocation_bytes`, with the op and its shape): CUDA's caching allocator keeps a
freed block of that size for the next call, and at the edge of memory the next call's
smaller tensors are carved out of it, so the largest tensor then needs room twice
(memory_fit.py). The batch that fits: memory_fit.py, memory_seq.py; the remedies
that trade time for memory: memory_remedies.py. Not yet: what a larger batch buys
(issue 26 stays open).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gobrrr.state import preserved_state, walk
from gobrrr.workload import Workload

__all__ = ["MemoryProfile", "measure_memory", "CATEGORIES", "FRAGMENTED"]

# MemTracker's reference types -> the report's category names (issue 26's JSON keys)
CATEGORIES = {"PARAM": "parameters", "BUFFER": "buffers", "GRAD": "gradients",
              "OPT": "optimizer_state", "ACT": "activations", "TEMP": "temporaries",
              "OTH": "other"}
FRAGMENTED = 1.5  # reserved over allocated at the peak beyond this: said as fragmentation
MODULE_DEPTH = 2  # module rows: the root's children and theirs


@dataclass
class MemoryProfile:
    device: str
    peak_bytes: int  # live tensor storages at the step's peak (MemTracker)
    by_category: dict[str, int]  # at the peak, CATEGORIES' names
    modules: list[dict[str, Any]] = field(default_factory=list)  # per-module activations
    allocator: dict[str, int] | None = None  # CUDA: max allocated / reserved in the call
    notes: list[str] = field(default_factory=list)
    largest_allocation_bytes: int = 0  # the largest storage one op allocated in the call
    largest_allocation: dict[str, Any] | None = None  # its op and shape

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "peak_bytes": self.peak_bytes,
                **{f"{k}_bytes": v for k, v in self.by_category.items()},
                "largest_allocation_bytes": self.largest_allocation_bytes,
                "largest_allocation": self.largest_allocation,
                "modules": self.modules, "allocator": self.allocator,
                "notes": list(self.notes)}


def _by_category(snapshot: dict[Any, int]) -> dict[str, int]:
    out = {name: 0 for name in CATEGORIES.values()}
    for key, nbytes in snapshot.items():
        name = CATEGORIES.get(getattr(key, "name", str(key)))
        if name is not None:
            out[name] += int(nbytes)
    return out


def _largest_mode() -> Any:
    """A dispatch mode that keeps the largest storage any op's output got that none of
    its inputs had (a view or an in-place op's result aliases an input's storage: not
    an allocation). NB: what ops allocate outside their outputs (cuBLAS and cuDNN
    workspaces) is not seen, as MemTracker does not see it."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def storages(tree: Any) -> list[Any]:
        return [t.untyped_storage() for t in tree_flatten(tree)[0]
                if isinstance(t, torch.Tensor)]

    class Largest(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.nbytes = 0
            self.what: dict[str, Any] | None = None

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            seen = {s.data_ptr() for s in storages((args, kwargs))}
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                s = t.untyped_storage()
                if s.nbytes() > self.nbytes and s.data_ptr() not in seen:
                    self.nbytes = s.nbytes()
                    self.what = {"op": str(func), "shape": list(t.shape),
                                 "dtype": str(t.dtype).removeprefix("torch.")}
            return out

    return Largest()


def _optimizer_state_bytes(optimizers: list[Any]) -> int:
    """Bytes of the tensors the optimizers keep in their state, each storage once."""
    import torch

    seen: dict[int, int] = {}
    for opt in optimizers:
        for st in opt.state.values():
            for t in st.values():
                if isinstance(t, torch.Tensor):
                    s = t.untyped_storage()
                    seen[s.data_ptr() or id(s)] = s.nbytes()
    return sum(seen.values())


def _module_rows(mt: Any, root: Any, device: Any) -> list[dict[str, Any]]:
    """Each module to MODULE_DEPTH: the activation bytes its forward left alive (after
    its forward less before it), and its forward's and backward's peaks."""
    rows = []
    for name, mod in root.named_modules():
        depth = 0 if not name else name.count(".") + 1
        if depth > MODULE_DEPTH or mod not in mt.memory_tracking:
            continue
        snaps = mt.memory_tracking[mod].snapshots
        at = _reader(snaps, device)
        pre, post = at("PRE_FW"), at("POST_FW")
        rows.append({"module": name or type(mod).__name__, "type": type(mod).__name__,
                     "activations_bytes": (post - pre) if pre is not None
                     and post is not None else None,
                     "forward_peak_bytes": at("PEAK_FW", "Total"),
                     "backward_peak_bytes": at("PEAK_BW", "Total")})
    return rows


def _reader(snaps: dict[Any, Any], device: Any) -> Any:
    """(state, key) -> the bytes of `key` ("ACT", or "Total") in a module's last
    snapshot of `state` (a _ModState name), None when it has none."""

    def at(state: str, key: str = "ACT") -> int | None:
        st = _state(state)
        got = snaps.get(st) if st is not None else None
        if not got:
            return None
        per_dev = got[-1].get(device, {})
        return sum(int(v) for k, v in per_dev.items() if getattr(k, "name", str(k)) == key)

    return at


def _state(name: str) -> Any:
    """MemTracker's module state of that name (None where this torch has none)."""
    from torch.distributed._tools import mem_tracker

    return getattr(getattr(mem_tracker, "_ModState", None), name, None)


def measure_memory(w: Workload) -> MemoryProfile:
    """One warm call, then one call under MemTracker (module docstring)."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    reach = walk(w.fn, w.args, w.kwargs)
    device = (torch.device("cuda", torch.cuda.current_device()) if w.device == "cuda"
              else torch.device(w.device))
    notes: list[str] = []
    with preserved_state(w, snapshot_on="host") as state:
        w.run("the warm call")
        mt = MemTracker()
        mt.track_external(*reach.modules, *reach.optimizers)
        if w.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with mt, _largest_mode() as largest:
            w.run("the measured call")
        # what the optimizers keep, read before preserved_state puts theirs back
        kept = _optimizer_state_bytes(reach.optimizers)
        allocator = None
        if w.device == "cuda":
            torch.cuda.synchronize()
            allocator = {"max_allocated_bytes": int(torch.cuda.max_memory_allocated()),
                         "max_reserved_bytes": int(torch.cuda.max_memory_reserved())}
    notes += [f"warning: {line}" for line in state.warnings]
    peak = mt.get_tracker_snapshot("peak").get(device, {})
    cats = _by_category(peak)
    # MemTracker counts what the optimizer's step allocates as its state; the state is
    # what the optimizer keeps (exp_avg, exp_avg_sq, step), the rest that step's
    # temporaries
    if cats["optimizer_state"] > kept:
        cats["temporaries"] += cats["optimizer_state"] - kept
        cats["optimizer_state"] = kept
    total = int(peak.get("Total", sum(cats.values())))
    subs = {id(m) for r in reach.modules for m in r.modules() if m is not r}
    rows = [row for root in reach.modules if id(root) not in subs  # the outermost ones
            for row in _module_rows(mt, root, device)]
    if allocator is not None:
        alloc, reserved = allocator["max_allocated_bytes"], allocator["max_reserved_bytes"]
        if alloc and reserved > FRAGMENTED * alloc:
            notes.append(f"the allocator reserved {reserved / 2**20:.0f} MiB against "
                         f"{alloc / 2**20:.0f} MiB allocated at most: fragmentation "
                         "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True can return "
                         "it)")
    if not reach.modules:
        notes.append("no nn.Module reached: parameters and activations cannot be told "
                     "apart from other tensors")
    return MemoryProfile(w.device, total, cats, rows, allocator, notes, largest.nbytes,
                         largest.what)

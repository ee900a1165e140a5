"""The distributed remedies of `gobrrr optimize` under torchrun: DDP's bucket size, its
gradient-as-bucket-view and static-graph flags, a bf16 gradient-compression comm hook, a
larger per-GPU batch (advice), and for FSDP2 `reshard_after_forward` and explicit
prefetching. Each predicts its gain from the distributed diagnosis (`DistFacts`), applies
to a copy of the workload on every rank (dist/optimize.py runs them in lockstep), and
has the code the user writes.

Predictions are deliberately simple and approximate (docs/multigpu.md: remedies); the
measured A/B gain is what decides. With T the step time, E the exposed communication per
step (the trace's, rank 0), G the gradient bytes (fp32: 4 per parameter), W the
calibrated memory bandwidth and t(S) the time of one all-reduce of S bytes:
- gradient_as_bucket_view: DDP copies each gradient into its flat bucket before the
  all-reduce and back after it (torch/csrc/distributed/c10d/reducer.cpp:
  mark_variable_ready copies in, finalize_bucket_dense copies out): 2 copies of G bytes,
  each read and written, 4G / W saved, at most the no_sync bound (which removes them too).
- bf16_compress_hook: half the bytes on the wire, so half of E, minus the casts
  (fp32 -> bf16 reads 4 and writes 2 bytes per element, bf16 -> fp32 back reads 2 and
  writes 4: 3G bytes / W).
- bucket_cap_mb: buckets from DDP's rule (parameters in reverse order, a bucket closes
  once it reaches the cap); the backward hides H = C_now - E of the all-reduces' total
  time C = sum t(S_i) (measured now, assumed unchanged), the last bucket (ready when the
  backward ends) never hides: the model's exposed time m = min(C, max(t(last), C - H)),
  and the prediction is E - (m_now - m_cap). t(S) holds a per-call latency only through
  calibrate --distributed's size-dependent curve; without it, bandwidth alone.
- static_graph, FSDP2 prefetching: no budget term (measured only).
- FSDP2 reshard_after_forward=False: the backward's all-gather goes; with exposure
  proportional to bytes (two all-gathers of the parameters P, one reduce-scatter of G),
  E x P / (2P + G).
- larger batch (advice): the gradients, so the all-reduce, stay while the rest of the
  step doubles: T(2B) ~ 2(T - E) + E.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gobrrr.gains import Gain, speedup_from_saved
from gobrrr.units import fmt_num, fmt_s

__all__ = ["DistFacts", "DistRemedy", "CATALOG", "catalog_for", "ddp_buckets",
           "allreduce_s", "predict_bucket_cap", "predict_bucket_view", "predict_bf16",
           "predict_batch", "predict_reshard", "DEFAULT_BUCKET_CAP_MB", "FIRST_BUCKET_MB",
           "BUCKET_SWEEP_MB", "rewrap_ddp", "swap_references", "find_ddps", "find_fsdp",
           "apply_fsdp", "combined_gain"]

DEFAULT_BUCKET_CAP_MB = 25.0  # torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB
# torch.distributed._DEFAULT_FIRST_BUCKET_BYTES: DDP's first bucket when the cap is the
# default (an explicit bucket_cap_mb gives the first bucket that cap too)
FIRST_BUCKET_MB = 1.0
BUCKET_SWEEP_MB = (1.0, 5.0, 100.0, 400.0)  # beside the default 25
_MIB = 2**20


@dataclass(frozen=True)
class DistFacts:
    """What the predictions read, from the distributed diagnosis (rank 0's budget and
    the merged `distributed` section) and the base copy's parameters."""

    kind: str  # "ddp" | "fsdp"
    world_size: int
    step_s: float  # T: rank 0's median step
    exposed_s: float  # E: exposed communication per step (the trace's)
    grad_bytes: tuple[int, ...]  # per parameter requiring grad, registration order
    mem_bw_bytes_per_s: float | None  # W: calibrated memory bandwidth
    # all-reduce bus bandwidth: from calibrate --distributed's curve when cached
    # (size-dependent: it holds the per-call latency), else this step's achieved one
    busbw: Callable[[float], float] | None = None
    busbw_source: str = ""
    no_sync_bound_s: float | None = None  # U: T_sync - T_no_sync, max over ranks
    bucket_cap_mb: float | None = None  # the workload's own (None: the default)
    param_bytes: int = 0  # FSDP2: unsharded parameter bytes (all-gathered per pass)

    @property
    def total_grad_bytes(self) -> int:
        return sum(self.grad_bytes)


def _gain(f: DistFacts, saved_s: float, part: str, basis: str) -> Gain:
    if saved_s <= 0:
        return Gain.none(f"predicted no gain: {basis}")
    return Gain(speedup_from_saved(f.step_s, saved_s), basis, {part: saved_s})


# ----------------------------------------------------------------- predictions


def ddp_buckets(grad_bytes: Sequence[int], cap_mb: float | None) -> list[int]:
    """Bucket sizes in bytes, first ready first, by DDP's rule: parameters in reverse
    registration order (the backward produces the last layer's gradients first), a
    bucket closes once it holds at least its cap; the first bucket's cap is 1 MiB when
    the cap is the default (`cap_mb` None), else the cap."""
    cap = (cap_mb if cap_mb is not None else DEFAULT_BUCKET_CAP_MB) * _MIB
    first = FIRST_BUCKET_MB * _MIB if cap_mb is None else cap
    out: list[int] = []
    cur = 0
    for b in reversed(grad_bytes):
        cur += b
        if cur >= (first if not out else cap):
            out.append(cur)
            cur = 0
    if cur:
        out.append(cur)
    return out


def allreduce_s(size_bytes: float, world_size: int, busbw: Callable[[float], float]
                ) -> float:
    """One all-reduce: S x 2(n-1)/n / busbw (nccl-tests' definition, read backwards)."""
    return size_bytes * 2 * (world_size - 1) / world_size / busbw(size_bytes)


def predict_bucket_cap(f: DistFacts, cap_mb: float) -> Gain:
    """Module docstring: the model's exposed time m = min(C, max(t(last), C - H)),
    H = C_now - E; its change from the buckets now to those at `cap_mb` is applied to the
    measured E (the model need not explain E itself: waiting for a late rank is in it)."""
    if f.kind != "ddp" or f.busbw is None:
        return Gain.none("no all-reduce bandwidth from the diagnosis")
    busbw = f.busbw
    now = ddp_buckets(f.grad_bytes, f.bucket_cap_mb)
    new = ddp_buckets(f.grad_bytes, cap_mb)

    def times(bs: list[int]) -> tuple[float, float]:
        ts = [allreduce_s(b, f.world_size, busbw) for b in bs]
        return sum(ts), (ts[-1] if ts else 0.0)

    (c_now, last_now), (c_new, last_new) = times(now), times(new)
    hidden = max(0.0, c_now - f.exposed_s)
    m_now = min(c_now, max(last_now, c_now - hidden))
    m_new = min(c_new, max(last_new, c_new - hidden))
    saved = m_now - m_new
    basis = (f"{len(now)} -> {len(new)} all-reduce(s) of {fmt_num(f.total_grad_bytes, 'B')} "
             f"({f.busbw_source}): all-reduce time {fmt_s(c_now)} -> {fmt_s(c_new)}, the "
             f"backward hides {fmt_s(hidden)}, the last bucket ({fmt_s(last_now)} -> "
             f"{fmt_s(last_new)}) never hides: exposed {fmt_s(f.exposed_s)} -> "
             f"{fmt_s(max(0.0, f.exposed_s - saved))} (approximate)")
    return _gain(f, min(saved, f.exposed_s), "communication", basis)


def predict_bucket_view(f: DistFacts) -> Gain:
    """4G / W (module docstring), at most the no_sync bound."""
    if f.kind != "ddp" or not f.mem_bw_bytes_per_s:
        return Gain.none("no memory bandwidth calibrated")
    g = f.total_grad_bytes
    saved = 4 * g / f.mem_bw_bytes_per_s
    basis = (f"DDP's bucket copies go: 2 x {fmt_num(g, 'B')} read and written = "
             f"{fmt_num(4 * g, 'B')} at {fmt_num(f.mem_bw_bytes_per_s, 'B/s')} = "
             f"{fmt_s(saved)}")
    if f.no_sync_bound_s is not None and saved > f.no_sync_bound_s:
        saved = f.no_sync_bound_s
        basis += f", at most the no_sync bound {fmt_s(saved)}"
    return _gain(f, saved, "memory", basis)


def predict_bf16(f: DistFacts) -> Gain:
    """E / 2 - 3G / W (module docstring)."""
    if f.kind != "ddp" or not f.mem_bw_bytes_per_s:
        return Gain.none("no memory bandwidth calibrated")
    g = f.total_grad_bytes
    casts = 3 * g / f.mem_bw_bytes_per_s
    basis = (f"half the bytes on the wire: half of the exposed {fmt_s(f.exposed_s)}, minus "
             f"the casts ({fmt_num(3 * g, 'B')} at {fmt_num(f.mem_bw_bytes_per_s, 'B/s')} "
             f"= {fmt_s(casts)})")
    return _gain(f, f.exposed_s / 2 - casts, "communication", basis)


def predict_reshard(f: DistFacts) -> Gain:
    """E x P / (2P + G): the backward's all-gather (module docstring)."""
    p, g = f.param_bytes, f.total_grad_bytes
    if f.kind != "fsdp" or p + g <= 0:
        return Gain.none("no FSDP2 parameters")
    saved = f.exposed_s * p / (2 * p + g)
    basis = (f"the backward's all-gather of {fmt_num(p, 'B')} goes: its share of the "
             f"exposed {fmt_s(f.exposed_s)} by bytes, P/(2P+G) = {p / (2 * p + g):.2f}; "
             "keeps the unsharded parameters from forward to backward (memory)")
    return _gain(f, saved, "communication", basis)


def predict_batch(f: DistFacts) -> Gain:
    """Throughput at 2x the per-GPU batch: T(2B) ~ 2(T - E) + E (module docstring)."""
    t, e = f.step_s, f.exposed_s
    if t <= 0:
        return Gain.none("no step time")
    t2 = 2 * (t - e) + e
    what = ("the parameters and gradients (and so the all-gathers and reduce-scatters)"
            if f.kind == "fsdp" else "the gradients (and so the all-reduce)")
    basis = (f"{what} stay while the rest of the step "
             f"doubles: 2x batch in ~{fmt_s(t2)} vs 2 x {fmt_s(t)}, {2 * t / t2:.2f}x "
             f"samples per second; communication {e / t:.0%} -> {e / t2:.0%} of the step "
             "(throughput, not latency; approximate: assumes the rest scales linearly)")
    if 2 * t / t2 < 1.1:
        return Gain.none(basis + ", under the 1.1x worth advising")
    return Gain(2 * t / t2, basis)


def _no_term(why: str) -> Callable[[DistFacts], Gain]:
    return lambda _f: Gain.none(why)


# ----------------------------------------------------------------- the catalog


@dataclass(frozen=True)
class DistRemedy:
    """One distributed remedy. `settings`: DDP constructor arguments (and "comm_hook":
    "bf16") for kind "ddp", FSDP2 setters for kind "fsdp"; remedies of one `group`
    exclude each other (one bucket size)."""

    name: str
    kind: str  # "ddp" | "fsdp"
    group: str
    settings: dict[str, Any]
    predict: Callable[[DistFacts], Gain]
    snippet: str
    precision: str | None = None  # "bf16": gradients rounded, judged at bf16 tolerance
    advice_only: bool = False
    regime: str = "communication"
    extra: dict[str, Any] = field(default_factory=dict)


def _bucket(cap: float) -> DistRemedy:
    def predict(f: DistFacts) -> Gain:
        return predict_bucket_cap(f, cap)

    return DistRemedy(
        f"bucket_cap_mb_{cap:g}", "ddp", "bucket", {"bucket_cap_mb": cap}, predict,
        f"model = DDP(model, bucket_cap_mb={cap:g})  # default 25: fewer, larger "
        "all-reduces vs more overlap")


CATALOG: list[DistRemedy] = [
    DistRemedy("gradient_as_bucket_view", "ddp", "view", {"gradient_as_bucket_view": True},
               predict_bucket_view,
               "model = DDP(model, gradient_as_bucket_view=True)  # grads are views into "
               "DDP's buckets: no copies\n# (call optimizer.zero_grad(set_to_none=False) "
               "or None-grads are re-created as views)", regime="memory"),
    *[_bucket(c) for c in BUCKET_SWEEP_MB],
    DistRemedy("static_graph", "ddp", "static", {"static_graph": True},
               _no_term("no budget term: DDP skips its per-step graph bookkeeping; "
                        "measured only"),
               "model = DDP(model, static_graph=True)  # the same parameters get "
               "gradients every step", regime="overhead"),
    DistRemedy("bf16_compress_hook", "ddp", "hook", {"comm_hook": "bf16"}, predict_bf16,
               "from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import "
               "bf16_compress_hook\nmodel.register_comm_hook(None, bf16_compress_hook)  "
               "# all-reduce gradients in bf16", precision="bf16"),
    DistRemedy("larger_batch", "ddp", "batch", {}, predict_batch,
               "# double the per-GPU batch if memory and convergence allow: the "
               "all-reduce stays, the math doubles", advice_only=True),
    DistRemedy("reshard_after_forward_false", "fsdp", "reshard",
               {"reshard_after_forward": False}, predict_reshard,
               "fully_shard(block, reshard_after_forward=False)  # or "
               "model.set_reshard_after_forward(False): no all-gather in the backward, "
               "parameters kept unsharded between forward and backward"),
    DistRemedy("explicit_prefetch", "fsdp", "prefetch", {"prefetch": 1},
               _no_term("no budget term: the next block's all-gather is issued earlier; "
                        "measured only"),
               "blocks = [m for m in model.modules() if isinstance(m, FSDPModule)]\n"
               "for i, b in enumerate(blocks):\n"
               "    b.set_modules_to_forward_prefetch(blocks[i + 1:i + 2])\n"
               "    b.set_modules_to_backward_prefetch(blocks[max(0, i - 1):i][::-1])"),
    DistRemedy("larger_batch_fsdp", "fsdp", "batch", {}, predict_batch,
               "# double the per-GPU batch if memory and convergence allow: the "
               "collectives stay, the math doubles", advice_only=True),
]


def catalog_for(kind: str) -> list[DistRemedy]:
    return [r for r in CATALOG if r.kind == kind]


def combined_gain(f: DistFacts, gains: Sequence[Gain], names: Sequence[str]) -> Gain:
    """Several remedies together: savings from one part each remove their share of what
    the others leave (as gobrrr.gains.combine), the parts here being the exposed
    communication and the rest of the step."""
    parts = {"communication": f.exposed_s, "memory": max(0.0, f.step_s - f.exposed_s),
             "overhead": max(0.0, f.step_s - f.exposed_s)}
    remaining = dict.fromkeys(parts, 1.0)
    for g in gains:
        for p, s in g.saved_s.items():
            if parts.get(p, 0) > 0:
                remaining[p] *= max(0.0, 1.0 - s / parts[p])
    saved = sum(parts[p] * (1.0 - remaining[p]) for p in parts)
    shown = [f"{n} {g.speedup:.2f}x" for n, g in zip(names, gains, strict=True)
             if g.speedup]
    if not shown:
        return Gain.none("no part predicts a gain")
    return Gain(speedup_from_saved(f.step_s, saved), "; ".join(shown) + ": combined "
                "part by part (communication, the rest)")


# ----------------------------------------------------------------- applying


def find_ddps(modules: Sequence[Any]) -> list[Any]:
    from torch.nn.parallel import DistributedDataParallel

    return [m for m in modules if isinstance(m, DistributedDataParallel)]


def find_fsdp(modules: Sequence[Any]) -> list[Any]:
    """Every FSDP2 module (fully_shard) under the reachable modules, in module order."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        return []
    seen: set[int] = set()
    out = []
    for top in modules:
        for m in top.modules():
            if isinstance(m, FSDPModule) and id(m) not in seen:
                seen.add(id(m))
                out.append(m)
    return out


def swap_references(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], old: Any,
                    new: Any) -> tuple[Any, tuple[Any, ...], int]:
    """Point every reference to `old` that the copied workload reaches at `new`: closure
    cells, module globals (the copy's own dict), object attributes, list and dict
    entries, modules' children and the arguments. Returns (fn, args, references
    swapped). Only for a copy: the user's objects are never touched."""
    from gobrrr.state import walk

    reach = walk(fn, args, kwargs)
    n = 0
    for cell in reach.cells:
        try:
            if cell.cell_contents is old:
                cell.cell_contents = new
                n += 1
        except ValueError:  # an empty cell
            continue
    for g, name in reach.globals:
        if g.get(name) is old:
            g[name] = new
            n += 1
    for obj in reach.objects:
        for k, v in list(vars(obj).items()):
            if v is old:
                setattr(obj, k, new)
                n += 1
    for c in reach.containers:
        if isinstance(c, list):
            for i, v in enumerate(c):
                if v is old:
                    c[i] = new
                    n += 1
        elif isinstance(c, dict):
            for k, v in list(c.items()):
                if v is old:
                    c[k] = new
                    n += 1
    for m in reach.modules:
        if m is old:
            continue
        for name, child in list(m.named_children()):
            if child is old:
                setattr(m, name, new)
                n += 1
    for k, v in list(kwargs.items()):
        if v is old:
            kwargs[k] = new
            n += 1
    if fn is old:
        fn, n = new, n + 1
    if any(a is old for a in args):
        n += sum(a is old for a in args)
        args = tuple(new if a is old else a for a in args)
    return fn, args, n


def _ddp_kwargs(old: Any) -> dict[str, Any]:
    """The constructor arguments that rebuild `old` as it is (reading its attributes)."""
    cap = getattr(old, "bucket_bytes_cap", None)
    default = cap is None or cap == int(DEFAULT_BUCKET_CAP_MB * _MIB)
    # broadcast_buffers only when off: torch >= 2.13 warns on the argument itself
    off = {} if getattr(old, "broadcast_buffers", True) else {"broadcast_buffers": False}
    return off | {
        "device_ids": getattr(old, "device_ids", None),
        "output_device": getattr(old, "output_device", None),
        "process_group": old.process_group,
        "bucket_cap_mb": None if cap is None or default else cap / _MIB,
        "find_unused_parameters": bool(getattr(old, "find_unused_parameters", False)),
        "gradient_as_bucket_view": bool(getattr(old, "gradient_as_bucket_view", False)),
        "static_graph": bool(getattr(old, "static_graph", False)),
    }


def rewrap_ddp(old: Any, settings: dict[str, Any]) -> Any:
    """A new DDP around `old.module` (a copy's) with `settings` (DDP's own arguments,
    "comm_hook", and "process_group": default `old`'s).
    The DDP constructor is collective (it broadcasts rank 0's parameters and checks
    their shapes across ranks): every rank rewraps in the same stage."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    kwargs = _ddp_kwargs(old)
    hook = settings.get("comm_hook")
    kwargs.update({k: v for k, v in settings.items() if k != "comm_hook"})
    new = DDP(old.module, **kwargs)
    if hook is None and getattr(old, "_comm_hooks", None):
        raise RuntimeError("the workload's DDP has a comm hook gobrrr cannot carry over")
    if hook == "bf16":
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import (
            bf16_compress_hook,
        )

        hook_fn: Any = bf16_compress_hook
        if dist.get_backend(old.process_group) != "nccl":
            # DDP refuses the hook by its name off NCCL (_check_comm_hook wants CUDA and
            # NCCL >= 2.10), though gloo all-reduces bf16: the same function under
            # another name, so the CPU tests check its numerics
            def bf16_compress_hook_gloo(process_group: Any, bucket: Any) -> Any:
                return bf16_compress_hook(process_group, bucket)

            # DDP checks the annotations, and this module's are strings (PEP 563)
            bf16_compress_hook_gloo.__annotations__ = {}
            hook_fn = bf16_compress_hook_gloo
        new.register_comm_hook(new.process_group, hook_fn)
    return new


def apply_fsdp(modules: Sequence[Any], settings: dict[str, Any]) -> list[str]:
    """Change the FSDP2 settings of a fresh build in place; what was done, in words."""
    units = find_fsdp(modules)
    if not units:
        raise RuntimeError("no FSDP2 (fully_shard) module in this build")
    done = []
    if "reshard_after_forward" in settings:
        for u in units:
            u.set_reshard_after_forward(settings["reshard_after_forward"], recurse=False)
        done.append(f"reshard_after_forward={settings['reshard_after_forward']} on "
                    f"{len(units)} unit(s)")
    if settings.get("prefetch"):
        # the root (units[0], called first) gathers its own parameters; the blocks below
        # it prefetch one ahead in forward and one behind in backward
        blocks = units[1:]
        for i, b in enumerate(blocks):
            if i + 1 < len(blocks):
                b.set_modules_to_forward_prefetch([blocks[i + 1]])
            if i > 0:
                b.set_modules_to_backward_prefetch([blocks[i - 1]])
        done.append(f"prefetch one unit ahead over {len(blocks)} block(s)")
    return done

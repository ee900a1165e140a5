"""The DDP remedies of a torchrun job: DDP's bucket size, its gradient-as-bucket-view and
static-graph flags, a bf16 gradient-compression comm hook, and a larger per-GPU batch
(advice). Each is a RemedySpec like the single-process ones: it predicts its gain from
the distributed diagnosis (the budget with its communication part, the ceilings, and
Context.comm: comm.py), so `gobrrr doctor` under torchrun lists it with that prediction
and `gobrrr optimize` starts from the same number; it applies to a copy by rebuilding the
DDP wrapper around the copy's module with its settings (dist/optimize.py runs it on every
rank in lockstep).

With T, E, G, W as in comm.py and t(S) the time of one all-reduce of S bytes:
- gradient_as_bucket_view: DDP copies each gradient into its flat bucket before the
  all-reduce and back after it (torch/csrc/distributed/c10d/reducer.cpp:
  mark_variable_ready copies in, finalize_bucket_dense copies out): 2 copies of G bytes,
  each read and written, 4G / W saved, at most the no_sync bound (which removes them too).
- bf16_compress_hook: half the bytes on the wire, so half of X, minus the casts
  (fp32 -> bf16 reads 4 and writes 2 bytes per element, bf16 -> fp32 back reads 2 and
  writes 4: 3G bytes / W).
- bucket_cap_mb: buckets from DDP's rule (parameters in reverse order, a bucket closes
  once it reaches the cap); the backward hides H = C_now - X of the all-reduces' total
  time C = sum t(S_i) (measured now, assumed unchanged), the last bucket (ready when the
  backward ends) never hides: the model's exposed time m = min(C, max(t(last), C - H)),
  and the prediction is X - (m_now - m_cap). t(S) holds a per-call latency only through
  calibrate --distributed's size-dependent curve; without it, bandwidth alone.
- static_graph: no budget term (measured only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gobrrr.gains import Gain
from gobrrr.remedies.base import PREP_FLAG, STAGE_MUTATE, Candidate, Context, RemedySpec
from gobrrr.remedies.comm import (
    CommFacts,
    applies_to,
    comm_gain,
    predict_batch,
    transfer_s,
    waiting_note,
)
from gobrrr.state import describe, walk
from gobrrr.units import fmt_num, fmt_s

__all__ = ["SPECS", "ddp_buckets", "allreduce_s", "predict_bucket_cap",
           "predict_bucket_view", "predict_bf16", "DEFAULT_BUCKET_CAP_MB",
           "FIRST_BUCKET_MB", "BUCKET_SWEEP_MB", "rewrap_ddp", "rewrap", "swap_references",
           "find_ddps"]

DEFAULT_BUCKET_CAP_MB = 25.0  # torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB
# torch.distributed._DEFAULT_FIRST_BUCKET_BYTES: DDP's first bucket when the cap is the
# default (an explicit bucket_cap_mb gives the first bucket that cap too)
FIRST_BUCKET_MB = 1.0
BUCKET_SWEEP_MB = (1.0, 5.0, 100.0, 400.0)  # beside the default 25
_MIB = 2**20


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


def predict_bucket_cap(ctx: Context, cap_mb: float) -> Gain:
    """Module docstring: the model's exposed time m = min(C, max(t(last), C - H)),
    H = C_now - X; its change from the buckets now to those at `cap_mb` is applied to the
    measured X (E less the waiting for a late rank, which no bucket moves)."""
    f = ctx.comm
    if f is None or f.kind != "ddp" or f.busbw is None:
        return Gain.none("no all-reduce bandwidth from the diagnosis")
    busbw = f.busbw
    exposed = transfer_s(ctx)
    now = ddp_buckets(f.grad_bytes, f.bucket_cap_mb)
    new = ddp_buckets(f.grad_bytes, cap_mb)

    def times(bs: list[int]) -> tuple[float, float]:
        ts = [allreduce_s(b, f.world_size, busbw) for b in bs]
        return sum(ts), (ts[-1] if ts else 0.0)

    (c_now, last_now), (c_new, last_new) = times(now), times(new)
    hidden = max(0.0, c_now - exposed)
    m_now = min(c_now, max(last_now, c_now - hidden))
    m_new = min(c_new, max(last_new, c_new - hidden))
    saved = m_now - m_new
    basis = (f"{len(now)} -> {len(new)} all-reduce(s) of {fmt_num(f.total_grad_bytes, 'B')} "
             f"({f.busbw_source}): all-reduce time {fmt_s(c_now)} -> {fmt_s(c_new)}, the "
             f"backward hides {fmt_s(hidden)}, the last bucket ({fmt_s(last_now)} -> "
             f"{fmt_s(last_new)}) never hides: exposed {fmt_s(exposed)} -> "
             f"{fmt_s(max(0.0, exposed - saved))}{waiting_note(ctx)} (approximate)")
    return comm_gain(ctx, min(saved, exposed), "communication", basis)


def _ddp_and_bandwidth(ctx: Context) -> tuple[CommFacts, float] | None:
    """(the DDP job's facts, W) when both are known."""
    f = ctx.comm
    w = getattr(ctx.ceilings, "bandwidth_bytes_per_s", None)
    return (f, w) if f is not None and f.kind == "ddp" and w else None


def predict_bucket_view(ctx: Context) -> Gain:
    """4G / W (module docstring), at most the no_sync bound."""
    known = _ddp_and_bandwidth(ctx)
    if known is None:
        return Gain.none("no memory bandwidth calibrated")
    f, w = known
    g = f.total_grad_bytes
    saved = 4 * g / w
    basis = (f"DDP's bucket copies go: 2 x {fmt_num(g, 'B')} read and written = "
             f"{fmt_num(4 * g, 'B')} at {fmt_num(w, 'B/s')} = {fmt_s(saved)}")
    if f.no_sync_bound_s is not None and saved > f.no_sync_bound_s:
        saved = f.no_sync_bound_s
        basis += f", at most the no_sync bound {fmt_s(saved)}"
    return comm_gain(ctx, saved, "memory", basis)


def predict_bf16(ctx: Context) -> Gain:
    """X / 2 - 3G / W (module docstring)."""
    known = _ddp_and_bandwidth(ctx)
    if known is None:
        return Gain.none("no memory bandwidth calibrated")
    f, w = known
    g = f.total_grad_bytes
    casts = 3 * g / w
    exposed = transfer_s(ctx)
    basis = (f"half the bytes on the wire: half of the exposed {fmt_s(exposed)}"
             f"{waiting_note(ctx)}, minus the casts ({fmt_num(3 * g, 'B')} at "
             f"{fmt_num(w, 'B/s')} = {fmt_s(casts)})")
    return comm_gain(ctx, exposed / 2 - casts, "communication", basis)


def _no_term(why: str) -> Callable[[Context], Gain]:
    return lambda _ctx: Gain.none(why)


# ----------------------------------------------------------------- applying


def find_ddps(modules: Sequence[Any]) -> list[Any]:
    from torch.nn.parallel import DistributedDataParallel

    return [m for m in modules if isinstance(m, DistributedDataParallel)]


def swap_references(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], old: Any,
                    new: Any) -> tuple[Any, tuple[Any, ...], int]:
    """Point every reference to `old` that the copied workload reaches at `new`: closure
    cells, module globals (the copy's own dict), object attributes, list and dict
    entries, modules' children and the arguments. Returns (fn, args, references
    swapped). Only for a copy: the user's objects are never touched."""
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


def rewrap(cand: Candidate, settings: Mapping[str, Any]) -> tuple[Candidate, list[str]]:
    """The copy `cand` with its DDP wrapper rebuilt with `settings` (rewrap_ddp), every
    reference to the old wrapper swapped for the new one; what was done, in words. The
    DDP constructor is collective: every rank rewraps in the same stage."""
    (old,) = find_ddps(cand.modules)
    new = rewrap_ddp(old, dict(settings))
    fn, args, n = swap_references(cand.fn, cand.args, cand.kwargs, old, new)
    if n == 0:
        raise RuntimeError("the DDP module is not referenced where gobrrr can swap it "
                           "(closure, global, attribute, container, argument)")
    # The old wrapper's reducer has autograd hooks on the very parameters the new one
    # wraps: drop it now (its destructor removes them), not whenever the cyclic GC
    # collects the old wrapper, which happens at a different moment on each rank
    for attr in ("logger", "reducer"):
        if hasattr(old, attr):
            delattr(old, attr)
    del old
    c = describe(fn, args, cand.kwargs)
    shown = {k: v for k, v in settings.items() if k != "process_group"}
    return (Candidate(c.fn, c.args, c.kwargs, c.modules, c.optimizers, c.tensors),
            [f"re-wrapped in DDP({shown}), {n} reference(s) swapped"])


def _apply(settings: Mapping[str, Any]) -> Callable[[Candidate, Context], Candidate]:
    def apply(cand: Candidate, _ctx: Context) -> Candidate:
        new, notes = rewrap(cand, settings)
        new.notes = [*cand.notes, *notes]
        return new

    return apply


# ----------------------------------------------------------------- the specs


def _spec(name: str, group: str, regime: str, settings: dict[str, Any],
          predict: Callable[[Context], Gain], snippet: str, how: str, *,
          precision: str | None = None, advice_only: bool = False) -> RemedySpec:
    return RemedySpec(name, "ddp", regime, STAGE_MUTATE, group, applies_to("ddp"), predict,
                      _apply(settings), snippet, title=name, how=how, precision=precision,
                      advice_only=advice_only, prep=PREP_FLAG, settings=settings)


def _bucket(cap: float) -> RemedySpec:
    def predict(ctx: Context) -> Gain:
        return predict_bucket_cap(ctx, cap)

    return _spec(
        f"bucket_cap_mb_{cap:g}", "bucket", "communication", {"bucket_cap_mb": cap},
        predict, f"model = DDP(model, bucket_cap_mb={cap:g})  # default 25: fewer, larger "
        "all-reduces vs more overlap", f"DDP(model, bucket_cap_mb={cap:g})")


SPECS: list[RemedySpec] = [
    _spec("gradient_as_bucket_view", "view", "memory", {"gradient_as_bucket_view": True},
          predict_bucket_view,
          "model = DDP(model, gradient_as_bucket_view=True)  # grads are views into "
          "DDP's buckets: no copies\n# (call optimizer.zero_grad(set_to_none=False) "
          "or None-grads are re-created as views)",
          "DDP(model, gradient_as_bucket_view=True): no copies into the buckets"),
    *[_bucket(c) for c in BUCKET_SWEEP_MB],
    _spec("static_graph", "static", "overhead", {"static_graph": True},
          _no_term("no budget term: DDP skips its per-step graph bookkeeping; measured "
                   "only"),
          "model = DDP(model, static_graph=True)  # the same parameters get gradients "
          "every step", "DDP(model, static_graph=True)"),
    _spec("bf16_compress_hook", "hook", "communication", {"comm_hook": "bf16"},
          predict_bf16,
          "from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import "
          "bf16_compress_hook\nmodel.register_comm_hook(None, bf16_compress_hook)  "
          "# all-reduce gradients in bf16",
          "model.register_comm_hook(None, bf16_compress_hook): gradients all-reduced in "
          "bf16", precision="bf16"),
    _spec("larger_batch", "batch", "communication", {}, predict_batch,
          "# double the per-GPU batch if memory and convergence allow: the all-reduce "
          "stays, the math doubles", "double the per-GPU batch", advice_only=True),
]

"""Optimizer remedies: fused and foreach implementations, zero_grad(set_to_none=True).

- fused (one kernel per param group and dtype for the whole update) and foreach (one
  launch per op over all parameters, instead of one per parameter): predicted from first
  principles over the counted optimizer-phase ops: each op that disappears saves the
  measured per-op cost (calibrate's op_overhead_s), and a fused Adam moves each of
  param, grad, exp_avg, exp_avg_sq once in and param, exp_avg, exp_avg_sq once out
  (7 x the parameter bytes) instead of every op's own reads and writes.
- set_to_none=True: no memset per gradient before backward (backward writes the grad
  instead of accumulating into zeros). Predicted: the zeroing ops' time.
All three change flags of the copy's optimizer (never the user's). The fused and foreach
snippets are written for the workload's own optimizer (its class, its parameter groups
and the arguments it was built with, read from the object: `optimizer_snippet`).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import replace
from typing import Any

from gobrrr.gains import Gain, gain_from_saved
from gobrrr.phases import OPTIMIZER
from gobrrr.remedies.base import (
    STAGE_MUTATE,
    Candidate,
    Context,
    RemedySpec,
)
from gobrrr.units import fmt_s

__all__ = ["SPECS", "set_group_flag", "optimizer_snippet"]

_FUSED_TYPES = {"Adam", "AdamW", "SGD", "Adagrad"}
_ZERO_OPS = ("aten::zero_", "aten::fill_", "aten::_foreach_zero_")
# the implementation flags the snippet sets (one of them), never copied from the object
_IMPL_FLAGS = ("fused", "foreach")
# a group's keys that are not constructor arguments: its tensors, and the lr a scheduler
# started from (LRScheduler adds initial_lr; the group's lr is then the scheduled one)
_GROUP_STATE = ("params", "initial_lr", "param_names")


def set_group_flag(optimizers: list[Any], flag: str, value: bool) -> int:
    """Set `flag` on every param group that has it (fused excludes foreach); step
    counts move to the parameter's device as fused kernels read them there."""
    import torch

    changed = 0
    for o in optimizers:
        for g in o.param_groups:
            if flag in g and g[flag] is not value:
                g[flag] = value
                changed += 1
                if flag == "fused" and value and "foreach" in g:
                    g["foreach"] = False
        if flag == "fused" and value:
            for p, st in o.state.items():
                step = st.get("step")
                if isinstance(step, torch.Tensor) and step.device != p.device:
                    st["step"] = step.to(device=p.device, dtype=torch.float32)
    return changed


def _class_path(cls: type) -> str:
    """torch.optim.AdamW for torch's own optimizers, else module.QualName."""
    import torch

    if getattr(torch.optim, cls.__name__, None) is cls:
        return f"torch.optim.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _signature(cls: type) -> tuple[dict[str, Any], set[str] | None]:
    """The constructor's defaults, and its argument names (None: it takes **kwargs, or
    cannot be read: every argument is kept)."""
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return {}, None
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return defaults, None
    return defaults, {p.name for p in params}


def _constructor_values(group: dict[str, Any]) -> dict[str, Any]:
    """A group's constructor arguments: its lr is the one it started from under a
    scheduler (initial_lr), not the scheduled value of this step."""
    out = {k: v for k, v in group.items() if k not in _GROUP_STATE}
    if "initial_lr" in group:
        out["lr"] = group["initial_lr"]
    return out


def _tensors(n: int) -> str:
    return f"{n} tensor" + ("" if n == 1 else "s")


def _same(a: Any, b: Any) -> bool:
    """Equal plain values (a tensor lr is never taken for a default)."""
    if hasattr(a, "shape") or hasattr(b, "shape"):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


def optimizer_snippet(opt: Any, flag: str) -> str:
    """The constructor call that builds `opt` again with `flag`=True: its class, its
    parameter groups (each group's arguments that differ from the optimizer's own), the
    arguments it was built with that differ from the class's defaults; the tensors are
    `...` (the user's own, as now)."""
    cls = type(opt)
    defaults = {k: v for k, v in getattr(opt, "defaults", {}).items()
                if k not in _IMPL_FLAGS}
    groups = [_constructor_values(g) for g in opt.param_groups]
    if len(groups) == 1:  # a scheduler's initial_lr is the constructor's lr
        defaults.update({k: v for k, v in groups[0].items() if k in defaults})
    sig, names = _signature(cls)
    # a value the class sets itself (AdamW's decoupled_weight_decay) is no argument of it
    defaults = {k: v for k, v in defaults.items() if names is None or k in names}
    kwargs = [f"{k}={v!r}" for k, v in defaults.items()
              if not (k in sig and _same(sig[k], v))]
    kwargs.append(f"{flag}=True")
    n_tensors = [len(g["params"]) for g in opt.param_groups]
    if len(groups) == 1:
        return (f"# your optimizer as built ({_tensors(n_tensors[0])}), with {flag}=True\n"
                f"opt = {_class_path(cls)}(..., {', '.join(kwargs)})")
    lines = [f"# your optimizer as built ({len(groups)} parameter groups), with {flag}=True",
             f"opt = {_class_path(cls)}(["]
    for i, g in enumerate(groups):
        own = [f'"{k}": {v!r}' for k, v in g.items()
               if k not in _IMPL_FLAGS and (names is None or k in names)
               and not (k in defaults and _same(defaults[k], v))]
        lines.append("    {" + ", ".join(['"params": ...', *own]) + "},"
                     f"  # group {i}: {_tensors(n_tensors[i])}")
    lines.append(f"], {', '.join(kwargs)})")
    return "\n".join(lines)


def _snippet(flag: str, generic: str) -> Any:
    def snippet_for(ctx: Context) -> str:
        opts = [o for o in ctx.optimizers if type(o).__name__ in _FUSED_TYPES
                or flag == "foreach"]
        if not opts:
            return generic
        return "\n".join(optimizer_snippet(o, flag) for o in opts)

    return snippet_for


def _opt_records(ctx: Context) -> list[Any]:
    return [r for r in ctx.records if r.phase == OPTIMIZER]


def _applies_fused(ctx: Context) -> str | None:
    if not ctx.optimizers:
        return "no optimizer in the workload"
    if not ctx.independent_copy:
        return "the workload's optimizer could not be copied apart from yours"
    names = {type(o).__name__ for o in ctx.optimizers}
    if not names & _FUSED_TYPES:
        return f"no fused implementation for {', '.join(sorted(names))}"
    if all(g.get("fused") for o in ctx.optimizers for g in o.param_groups):
        return "the optimizer is fused already"
    return None


def _applies_foreach(ctx: Context) -> str | None:
    if not ctx.optimizers:
        return "no optimizer in the workload"
    if not ctx.independent_copy:
        return "the workload's optimizer could not be copied apart from yours"
    groups = [g for o in ctx.optimizers for g in o.param_groups]
    if any(g.get("fused") for g in groups):
        return "the optimizer is fused already (foreach would be a step back)"
    default_on = ctx.device == "cuda"  # torch picks foreach by default for CUDA params
    if all(g.get("foreach") or (g.get("foreach") is None and default_on) for g in groups):
        return "the optimizer runs foreach already (torch's default on CUDA)"
    return None


def _predict_merge(ctx: Context, fused: bool) -> Gain:
    recs = _opt_records(ctx)
    b, ceil = ctx.budget, ctx.ceilings
    if b is None or ceil is None or not recs:
        return Gain.none("no counted optimizer ops (or no diagnose)")
    n_params = sum(len(g["params"]) for o in ctx.optimizers for g in o.param_groups)
    after_ops = len(ctx.optimizers) if fused else max(1, len(recs) // max(1, n_params))
    saved = {"overhead": max(0, len(recs) - after_ops) * ceil.op_overhead_s}
    basis = (f"{len(recs)} optimizer ops -> ~{after_ops}: "
             f"{len(recs) - after_ops} x {ceil.op_overhead_s * 1e6:.3g} us per op")
    if fused:
        p_bytes = sum(p.numel() * p.element_size() for o in ctx.optimizers
                      for g in o.param_groups for p in g["params"])
        before = sum(r.bytes for r in recs)
        after = 7 * p_bytes  # Adam: p, g, m, v in; p, m, v out
        if before > after:
            saved["memory"] = (before - after) / ceil.bandwidth_bytes_per_s
            basis += f"; bytes {before / 1e6:.3g} -> {after / 1e6:.3g} MB"
    gain = gain_from_saved(b, saved, basis)
    # by mechanism (gains.combine): the bytes are the fusion's too where a compile of
    # the step stacks with it (gains.SUBSUMED_BY), the launches are this remedy's own
    mechanisms = {"optimizer_launches": "overhead", "optimizer_bytes": "memory"}
    return replace(gain, by_mechanism={m: {part: gain.saved_s[part]}
                                       for m, part in mechanisms.items()
                                       if part in gain.saved_s})


def _applies_zero(ctx: Context) -> str | None:
    if not ctx.optimizers:
        return "no optimizer in the workload"
    if not ctx.independent_copy:
        return "the workload's optimizer could not be copied apart from yours"
    if ctx.zero_grad_set_to_none is None:  # doctor: not known; the budget decides
        return None
    if not ctx.zero_grad_set_to_none:
        return "the step never calls optimizer.zero_grad()"
    if all(ctx.zero_grad_set_to_none):
        return "zero_grad already sets grads to None"
    return None


def _predict_zero(ctx: Context) -> Gain:
    b = ctx.budget
    if b is None:
        return Gain.none("no diagnose budget")
    rows = [r for r in b.per_op if r.name in _ZERO_OPS]
    saved = {"overhead": sum(r.overhead_s for r in rows),
             "memory": sum(r.memory_s for r in rows),
             "compute": sum(r.compute_s for r in rows)}
    zero_s = sum(saved.values())
    if zero_s <= 0:
        return Gain.none("no zeroing ops timed")
    return gain_from_saved(b, saved, (
        f"{sum(r.calls for r in rows)} zeroing op(s), {fmt_s(zero_s)}, disappear (one "
        "memset per gradient)"))


def _apply_fused(cand: Candidate, ctx: Context) -> Candidate:
    if not set_group_flag(cand.optimizers, "fused", True):
        raise RuntimeError("no param group with a 'fused' flag")
    return cand


def _apply_foreach(cand: Candidate, ctx: Context) -> Candidate:
    if not set_group_flag(cand.optimizers, "foreach", True):
        raise RuntimeError("no param group with a 'foreach' flag")
    return cand


def _apply_zero(cand: Candidate, ctx: Context) -> Candidate:
    for o in cand.optimizers:
        # an instance attribute shadows the method: the user's step calls it unchanged
        def zero_grad(set_to_none: bool = True, _o: Any = o) -> None:
            type(_o).zero_grad(_o, set_to_none=True)

        o.zero_grad = functools.update_wrapper(zero_grad, type(o).zero_grad)
    return cand


_FUSED_GENERIC = "opt = torch.optim.Adam(model.parameters(), lr=..., fused=True)"
_FOREACH_GENERIC = "opt = torch.optim.Adam(model.parameters(), lr=..., foreach=True)"
SPECS = [
    RemedySpec("fused_optimizer", "optim", "overhead", STAGE_MUTATE, "optimizer",
               _applies_fused, lambda c: _predict_merge(c, True), _apply_fused,
               _FUSED_GENERIC, title="fused optimizer",
               how="construct the optimizer with fused=True",
               snippet_for=_snippet("fused", _FUSED_GENERIC),
               # under a compile of the whole step a fused optimizer is one extern
               # kernel, where a foreach one is traced and compiled: on a 2-core CPU, a
               # 4-layer GPT-2 step with AdamW compiled in 51 s fused, 83 s foreach
               # (2026-12-03); on the H200 at --budget-s 60 the GPT-2 training step's
               # background compile without it had not finished after 45 s
               keep_when_neutral=True),
    RemedySpec("foreach_optimizer", "optim", "overhead", STAGE_MUTATE, "optimizer",
               _applies_foreach, lambda c: _predict_merge(c, False), _apply_foreach,
               _FOREACH_GENERIC, title="foreach optimizer",
               how="construct the optimizer with foreach=True",
               snippet_for=_snippet("foreach", _FOREACH_GENERIC)),
    RemedySpec("zero_grad_set_to_none", "optim", "memory", STAGE_MUTATE, "zero_grad",
               _applies_zero, _predict_zero, _apply_zero,
               "opt.zero_grad(set_to_none=True)", title="zero_grad(set_to_none=True)",
               how="opt.zero_grad(set_to_none=True)"),
]

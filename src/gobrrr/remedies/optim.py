"""Optimizer remedies: fused and foreach implementations, zero_grad(set_to_none=True).

- fused (one kernel per param group and dtype for the whole update) and foreach (one
  launch per op over all parameters, instead of one per parameter): predicted from first
  principles over the counted optimizer-phase ops: each op that disappears saves the
  measured per-op cost (calibrate's op_overhead_s), and a fused Adam moves each of
  param, grad, exp_avg, exp_avg_sq once in and param, exp_avg, exp_avg_sq once out
  (7 x the parameter bytes) instead of every op's own reads and writes.
- set_to_none=True: no memset per gradient before backward (backward writes the grad
  instead of accumulating into zeros). Predicted: the zeroing ops' time.
All three change flags of the copy's optimizer (never the user's).
"""

from __future__ import annotations

import functools
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

__all__ = ["SPECS", "set_group_flag"]

_FUSED_TYPES = {"Adam", "AdamW", "SGD", "Adagrad"}
_ZERO_OPS = ("aten::zero_", "aten::fill_", "aten::_foreach_zero_")


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
    return gain_from_saved(b, saved, basis)


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


SPECS = [
    RemedySpec("fused_optimizer", "optim", "overhead", STAGE_MUTATE, "optimizer",
               _applies_fused, lambda c: _predict_merge(c, True), _apply_fused,
               "opt = torch.optim.Adam(model.parameters(), lr=..., fused=True)",
               title="fused optimizer", how="construct the optimizer with fused=True"),
    RemedySpec("foreach_optimizer", "optim", "overhead", STAGE_MUTATE, "optimizer",
               _applies_foreach, lambda c: _predict_merge(c, False), _apply_foreach,
               "opt = torch.optim.Adam(model.parameters(), lr=..., foreach=True)",
               title="foreach optimizer", how="construct the optimizer with foreach=True"),
    RemedySpec("zero_grad_set_to_none", "optim", "memory", STAGE_MUTATE, "zero_grad",
               _applies_zero, _predict_zero, _apply_zero,
               "opt.zero_grad(set_to_none=True)", title="zero_grad(set_to_none=True)",
               how="opt.zero_grad(set_to_none=True)"),
]

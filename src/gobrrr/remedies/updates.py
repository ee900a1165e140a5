"""Verification by what a step changes: two calls of a copy from one state give its
outputs, the update of every parameter over the first call (p1 - p0, in fp64 from the
stored values: exact) and the gradients after it; a candidate is judged against the
reference on all three, each at the tolerance of its precision (verify.py), grown for
eager's own run-to-run noise. The parameters themselves would say nothing: they move by
lr x grad, a change far below their own size, so the update is what is compared.

Used by the torchrun remedies (dist/optimize.py) and the memory remedies
(memory_remedies.py); moved here from dist/optimize.py so both read one implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gobrrr.remedies.evaluate import SEED, grad_pairs, trained_params
from gobrrr.remedies.verify import Comparison, compare, tolerance_given_noise
from gobrrr.state import clone_tree
from gobrrr.timing import device_sync

__all__ = ["RunOut", "run_calls", "update_error", "nondeterminism", "judge"]


@dataclass
class RunOut:
    """Two calls from one state: outputs, each parameter's update over the first call
    (fp64), and the gradients after it (None where a parameter has none)."""

    outputs: list[Any]
    updates: list[Any]
    grads: list[Any]
    # one unit in the last place of each parameter after the step (fp64): the storage
    # rounding of p1, which an update smaller than the parameter cannot be read below
    ulps: list[Any] = field(default_factory=list)


def _local(t: Any) -> Any:
    """A DTensor's local shard (FSDP2: each rank compares its own; no collective)."""
    return t.to_local() if hasattr(t, "to_local") else t


def run_calls(c: Any, device: str) -> RunOut:
    """Two calls of `c` (a state.Copied) from SEED: the RunOut the judge reads."""
    import torch

    sync = device_sync(device)
    params = trained_params(c.modules)
    with torch.no_grad():
        p0 = [_local(p).detach().double() for p in params]
    torch.manual_seed(SEED)
    if device == "cuda":
        torch.cuda.manual_seed_all(SEED)
    out1 = clone_tree(c.fn(*c.args, **c.kwargs))
    sync()
    with torch.no_grad():
        p1 = [_local(p).detach() for p in params]
        upd = [b.double() - a for b, a in zip(p1, p0, strict=True)]
        ulps = [(torch.nextafter(b.abs(), torch.full_like(b, math.inf)) - b.abs()).double()
                for b in p1]
        grads = [None if p.grad is None else _local(p.grad).detach().clone() for p in params]
    out2 = clone_tree(c.fn(*c.args, **c.kwargs))
    sync()
    return RunOut([out1, out2], upd, grads, ulps)


def update_error(ref: RunOut, cand: RunOut, measure: str) -> float:
    """How far the candidate's parameter updates are from the reference's, beyond one
    ulp of the parameter per element (both sides store p1 rounded to its format, so two
    correct updates may differ by up to one ulp): relative L2 of the excess over
    ||update||, or elementwise excess / (|update| + rms(update)). At a small learning
    rate the update is a few ulps of the parameter, and the rounding alone would read as
    a large relative error; the parameters themselves would read as equal whatever the
    gradients were."""
    import torch

    worst = 0.0
    for r, c, ulp in zip(ref.updates, cand.updates, ref.ulps, strict=True):
        if r.numel() == 0:
            continue
        if not torch.isfinite(c).all():
            return math.inf
        excess = ((c - r).abs() - ulp).clamp(min=0.0)
        if measure == "relative_l2":
            norm = r.norm().item()
            err = excess.norm().item() / norm if norm else (
                0.0 if excess.max().item() == 0 else math.inf)
        else:
            rms = r.pow(2).mean().sqrt().item()
            err = float((excess / (r.abs() + (rms if rms > 0 else 1.0))).max().item())
        worst = max(worst, err)
    return worst


def _grad_pairs(a: RunOut, b: RunOut) -> tuple[list[Any], list[Any]]:
    return grad_pairs(a.grads, b.grads)


def nondeterminism(ref: RunOut, twin: RunOut) -> dict[str, dict[str, float]]:
    """Eager vs eager, per quantity and measure."""

    rg, tg = _grad_pairs(ref, twin)
    quantities = {"outputs": (ref.outputs, twin.outputs), "grads": ([rg], [tg])}
    out = {q: {m: compare(r, t, m, 0.0).max_error for m in ("elementwise", "relative_l2")}
           for q, (r, t) in quantities.items()}
    out["updates"] = {m: update_error(ref, twin, m) for m in ("elementwise", "relative_l2")}
    return out


def judge(ref: RunOut, cand: RunOut, out_dtype: str, precision: str | None,
          nondet: dict[str, dict[str, float]]) -> dict[str, Any]:
    """This rank's verdict on a candidate: each quantity against the reference at the
    tolerance of its precision (grown for eager's own noise); ok only when all pass."""

    rg, cg = _grad_pairs(ref, cand)
    quantities = {"outputs": (ref.outputs, cand.outputs, out_dtype),
                  "updates": ([], [], "float32"), "grads": ([rg], [cg], "float32")}
    checks: dict[str, Any] = {}
    ok, reasons = True, []
    for q, (r, c, dtype) in quantities.items():
        tol = tolerance_given_noise(dtype, precision, nondet.get(q, {}))
        if tol.unverifiable:
            checks[q] = {"unverifiable": tol.unverifiable}
            ok = False
            reasons.append(f"{q}: {tol.unverifiable}")
            continue
        if q == "updates":  # the parameters after one step (update_error)
            err = update_error(ref, cand, tol.measure)
            desc = ("elementwise rtol" if tol.measure == "elementwise" else
                    "relative L2 <=") + f" {tol.rtol:g} beyond 1 ulp of the parameter"
            got = Comparison(err <= tol.rtol, err, desc, "" if err <= tol.rtol else
                             f"error {err:.3g} over the tolerance {tol.rtol:g}")
        else:
            got = compare(r, c, tol.measure, tol.rtol, tol.min_cosine)
        checks[q] = {"ok": got.ok, "max_error": got.max_error, "tolerance": got.tolerance,
                     "cosine_min": got.cosine}
        if not got.ok:
            ok = False
            reasons.append(f"{q}: {got.reason}")
    return {"ok": ok, "checks": checks, "reasons": reasons}

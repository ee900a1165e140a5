"""One candidate through the harness: copy, apply, prepare (compile / capture, timed
apart), restore the starting state, compare outputs, time A/B, check compile health.

Every failure (an exception while applying, compiling or capturing, out of memory, a
recompile while timing) becomes a RemedyResult with its reason; the run goes on.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gobrrr.compiled import dynamo_counts, graph_breaks_between
from gobrrr.errors import WorkloadError, first_line
from gobrrr.finite import nonfinite_summary
from gobrrr.remedies.attention import rewrite_fired
from gobrrr.remedies.base import (
    Candidate,
    Context,
    RemedyResult,
    RemedySpec,
    switches_on,
)
from gobrrr.remedies.result import ALL_ZERO_REFERENCE
from gobrrr.remedies.verify import (
    OutOfTime,
    ab_time,
    compare,
    compile_problems,
    dynamo_snapshot,
    tolerance_given_noise,
)
from gobrrr.state import (
    Copied,
    clone_tree,
    copy_workload,
    plain_state,
    put_back,
    restore,
    snapshot,
)
from gobrrr.timing import device_sync, time_call

__all__ = ["Reference", "make_reference", "evaluate", "out_dtype", "SEED", "WARM_CALLS",
           "all_zero", "warm_up"]

SEED = 1234  # every compared call sequence starts from this RNG state (dropout & co.)
WARM_CALLS = 3  # after preparation: compile happens on the first, autotuning after


@dataclass
class Reference:
    work: Copied  # the eager copy: side A of every A/B
    outputs: list[Any]  # two consecutive calls from the base state
    out_dtype: str  # lowest-precision floating output: picks the tolerance
    nondeterminism: dict[str, float]  # eager vs eager, per measure (empty: not finite)
    nonfinite: str | None = None  # where the reference has NaN/inf: nothing to verify
    call_s: float = 0.0  # one eager call, warm (what the search plan's estimates scale)
    all_zero: bool = False  # every floating output is zero: a comparison proves nothing


def _two_calls(call: Callable[[], Any], device: str) -> list[Any]:
    import torch

    torch.manual_seed(SEED)
    if device == "cuda":
        torch.cuda.manual_seed_all(SEED)
    outs = [clone_tree(call()), clone_tree(call())]
    device_sync(device)()
    return outs


def out_dtype(outputs: list[Any]) -> str:
    """The lowest-precision floating dtype among the outputs (float32 when none): it picks
    the tolerance."""
    import torch
    from torch.utils._pytree import tree_flatten

    order = ["float16", "bfloat16", "float32", "float64"]
    seen = [str(x.dtype).replace("torch.", "") for x in tree_flatten(outputs)[0]
            if isinstance(x, torch.Tensor) and x.is_floating_point()]
    known = [d for d in seen if d in order]
    return min(known, key=order.index) if known else "float32"


def _eager_call(work: Copied, where: str) -> Callable[[], Any]:
    """One call of an eager copy; the user's exception becomes a WorkloadError (their
    traceback, exit 2), as for every other call of their code outside a candidate."""
    def call() -> Any:
        try:
            return work.fn(*work.args, **work.kwargs)
        except Exception as exc:
            raise WorkloadError(where, exc) from exc

    return call


def make_reference(base: Copied, device: str) -> Reference:
    """Two eager copies from the base state: one is the reference (and A side), the
    other tells how much eager differs from itself."""
    ref = copy_workload(base.fn, base.args, base.kwargs)
    outs = _two_calls(_eager_call(ref, "running the eager reference"), device)
    twin = copy_workload(base.fn, base.args, base.kwargs)
    again = _two_calls(_eager_call(twin, "running the eager reference again"), device)
    dtype = out_dtype(outs)
    # the first of the two calls whose output is not finite, named as the user counts
    nonfinite = next((f"call {i + 1} {found}" for i, out in enumerate(outs)
                      if (found := nonfinite_summary(out))), None)
    # a third call of the twin (its outputs are taken): warm, as the timed calls will be
    call_s = time_call(_eager_call(twin, "running the eager reference again"), device)
    if nonfinite:  # NaN vs NaN is no measure of eager's noise: nothing can be verified
        return Reference(ref, outs, dtype, {}, nonfinite, call_s)
    nondet = {m: compare(outs, again, m, 0.0).max_error
              for m in ("elementwise", "relative_l2")}
    return Reference(ref, outs, dtype, nondet, call_s=call_s, all_zero=all_zero(outs))


def all_zero(outputs: list[Any]) -> bool:
    """Every floating tensor of the outputs is zero (and there is one): torchvision's
    untrained ViT, whose head starts at zero, "verified" a bf16 cast by 0 = 0."""
    import torch
    from torch.utils._pytree import tree_flatten

    floats = [x for x in tree_flatten(outputs)[0]
              if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()]
    return bool(floats) and not any(bool(x.any()) for x in floats)


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def _in_time(deadline: float, doing: str) -> None:
    """Between calls: past the --budget-s deadline the candidate is abandoned."""
    if time.perf_counter() >= deadline:
        raise OutOfTime(f"the --budget-s deadline came while {doing}")


def warm_up(cand: Candidate, sync: Callable[[], None], deadline: float, t0: float) -> None:
    """Prepare (compile options, capture) and make the WARM_CALLS warm calls, checking
    the deadline between calls; `t0`: when the preparation began (for the message)."""
    with switches_on(cand):
        for prep in cand.prepare:
            prep(cand)
        for i in range(WARM_CALLS):
            cand.call()
            sync()
            # the first call compiles (or autotunes): it cannot be interrupted
            _in_time(deadline, f"preparing (warm call {i + 1} of {WARM_CALLS}, "
                               f"{time.perf_counter() - t0:.1f} s in)")


def _abandoned(res: RemedyResult, exc: OutOfTime) -> tuple[RemedyResult, None]:
    res.status, res.reason = "skipped", f"abandoned: {exc}"
    return res, None


def evaluate(specs: list[RemedySpec], base: Copied, ref: Reference, ctx: Context,
             ab_budget_s: float, deadline: float = math.inf,
             hold: Callable[[float], float] | None = None
             ) -> tuple[RemedyResult, Candidate | None]:
    """Run the candidate made of `specs`; returns its result and, when it is verified
    faster, the live candidate (the caller keeps the best one). Past `deadline` (a
    time.perf_counter() value, checked between calls) it is abandoned: "skipped".
    `hold`: called with the compile's seconds once the candidate is warm, before it is
    verified and timed; returns the deadline to measure by (a compile child waits there
    for the search's turn: compile_child_main.py)."""
    name = "+".join(s.name for s in specs)
    res = RemedyResult(name, "+".join(dict.fromkeys(s.regime for s in specs)), "failed", "",
                       components=tuple(s.name for s in specs))
    w = copy_workload(base.fn, base.args, base.kwargs)
    cand = Candidate(w.fn, w.args, w.kwargs, w.modules, w.optimizers, w.tensors)
    sync = device_sync(ctx.device)
    try:
        for s in sorted(specs, key=lambda s: s.stage):
            cand = s.apply(cand, ctx)
        start = snapshot(cand.modules, cand.optimizers, cand.tensors)
        plain = plain_state(cand)  # an LR scheduler's step count, the LR it wrote
        compiling = dynamo_counts() if cand.compile_mode else None
        t0 = time.perf_counter()
        warm_up(cand, sync, deadline, t0)
        res.compile_s = time.perf_counter() - t0
    except OutOfTime as exc:
        res.compile_s = time.perf_counter() - t0
        del cand, w
        _free(ctx.device)
        return _abandoned(res, exc)
    except Exception as exc:  # noqa: BLE001 - compile/capture/OOM: a reason, not a crash
        res.reason = f"{'preparing' if cand.prepare else 'applying'}: {first_line(exc)}"
        del cand, w
        _free(ctx.device)
        return res, None
    res.checks["notes"] = list(cand.notes)
    if hold is not None:
        deadline = hold(res.compile_s)
    if compiling is not None:
        compiled_now = dynamo_counts()
        res.checks["graphs"] = compiled_now.graphs - compiling.graphs
        res.checks["graph_breaks"], res.checks["break_reasons"] = graph_breaks_between(
            compiling, compiled_now)
    warm = dynamo_snapshot() if cand.compile_mode else None
    if cand.compile_info.get("require_attention_rewrite"):

        fired = rewrite_fired()
        res.checks["attention_rewrites"] = fired
        if not fired:
            res.status = "advice"
            res.reason = ("Inductor's attention rewrite did not match this code: write "
                          "F.scaled_dot_product_attention by hand")
            return res, None
    try:
        _in_time(deadline, "verifying the outputs")
        restore(start)
        put_back(plain)
        with switches_on(cand):
            outs = _two_calls(cand.call, ctx.device)
    except OutOfTime as exc:
        return _abandoned(res, exc)
    except Exception as exc:  # noqa: BLE001
        res.reason = f"running: {first_line(exc)}"
        return res, None
    tol = tolerance_given_noise(ref.out_dtype, cand.precision or ctx.reference_precision,
                                ref.nondeterminism)
    notes = [tol.note] if tol.note else []
    unverifiable = (f"the reference output is not finite ({ref.nonfinite}): nothing to "
                    "verify against" if ref.nonfinite
                    else ALL_ZERO_REFERENCE if ref.all_zero else tol.unverifiable)
    if not unverifiable:
        cmp = compare(ref.outputs, outs, tol.measure, tol.rtol, tol.min_cosine)
        res.tolerance, res.max_error, res.verified = cmp.tolerance, cmp.max_error, cmp.ok
        if cmp.cosine is not None:
            res.checks["cosine_min"] = cmp.cosine
        if not cmp.ok:
            res.status, res.reason = "rejected", "; ".join([cmp.reason, *notes])
            return res, None
    try:
        ab = ab_time(lambda: ref.work.fn(*ref.work.args, **ref.work.kwargs), cand.call,
                     device=ctx.device, budget_s=ab_budget_s,
                     b_context=lambda: switches_on(cand), deadline=deadline)
    except OutOfTime as exc:
        return _abandoned(res, exc)
    except Exception as exc:  # noqa: BLE001
        res.reason = f"timing: {first_line(exc)}"
        return res, None
    if warm is not None:
        problems, cnotes = compile_problems(warm, dynamo_snapshot())
        notes += cnotes
        if problems:
            res.status = "failed"
            res.reason = "; ".join(problems + notes)
            res.checks["unvalidated_speedup"] = ab.speedup
            return res, None
    res.measured_speedup, res.interval = ab.speedup, ab.interval
    res.eager_s, res.candidate_s = ab.eager_s, ab.candidate_s
    res.checks["ab_rounds"], res.checks["calls_per_block"] = ab.rounds, ab.calls_per_block
    lo, hi = ab.interval
    timed = f"{ab.speedup:.2f}x (95% interval {lo:.2f}-{hi:.2f}, {ab.rounds} A/B rounds)"
    if unverifiable:  # timed, so the user sees the speed, but never a winner
        res.status = "unverifiable"
        res.reason = "; ".join([unverifiable, f"measured {timed}, outputs not verified",
                                *notes])
        return res, None
    change = ab.change
    res.status = {"faster": "verified", "slower": "slower"}.get(change,
                                                                 "no significant change")
    res.reason = "; ".join([timed, *notes])
    return res, (cand if change == "faster" else None)

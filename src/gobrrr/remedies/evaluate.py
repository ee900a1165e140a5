"""One candidate through the harness: copy, apply, prepare (compile / capture, timed
apart), restore the starting state, compare outputs, time A/B, check compile health.

A training step is also judged on its gradients: each trained parameter's gradient
after the first of the two compared calls, tensor by tensor, by relative L2 at the
tolerance of its precision grown for eager's own noise (verify.grad_tolerance). The
outputs see a gradient only through one optimizer step's change to the second call's
loss: at a learning rate as small as real training's that change is below the outputs'
tolerance whatever the gradient was (tests/test_grad_verification.py: a doubled
gradient at lr 1e-5). A compile with nested compile regions on this project's CPU
(torch 2.13) gave a toy's first block wrong gradients
(benchmarks/results/cpu/nested_grad_check.jsonl).

A step that draws random numbers (dropout) has gradients that hang on the draws: eager
GPT-2 (random weights, train mode) under another seed differs from itself by a median
0.72 relative L2 per tensor, up to 0.97 (2 x 128 tokens, this project's CPU:
benchmarks/results/cpu/grad_seed_noise.jsonl). A candidate that draws them another
way (Inductor's own RNG; on CUDA, dropout on a bf16 tensor) cannot be judged by its
gradients then: where it misses and eager under another seed misses by more than the
tolerance too, its gradients are "unverifiable" (said in its checks) and its outputs
alone judge it. A candidate that draws as eager does is still held to the tolerance.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
from gobrrr.remedies.guard_repr import short_tensor_repr
from gobrrr.remedies.result import ALL_ZERO_REFERENCE
from gobrrr.remedies.verify import (
    ABResult,
    OutOfTime,
    Tolerance,
    ab_time,
    compare,
    compile_problems,
    dynamo_snapshot,
    grad_tolerance,
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

__all__ = ["Reference", "make_reference", "evaluate", "time_ab", "out_dtype", "SEED", "WARM_CALLS",
           "all_zero", "warm_up", "trained_params", "grad_pairs", "failure_reason",
           "TREES_LIVENESS_NOTE"]

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
    # each trained parameter's gradient after the first call (None: it has none; empty:
    # nothing trained), and eager against eager on them, per measure
    grads: list[Any] = field(default_factory=list)
    grad_nondeterminism: dict[str, float] = field(default_factory=dict)
    grad_names: list[str] = field(default_factory=list)  # "GPT2LMHeadModel.lm_head.weight"
    # eager's gradients under another seed against SEED's, relative L2 (the worst
    # tensor): how much they hang on the step's random draws (0.0: none drawn)
    grad_seed_noise: float = 0.0
    # the same for the first call's outputs (a training step's loss under dropout)
    out_seed_noise: float = 0.0


def trained_params(modules: list[Any]) -> list[Any]:
    """The parameters a step can update (requires_grad), each once, in module order."""
    return [p for _, p in _named_trained(modules)]


def _named_trained(modules: list[Any]) -> list[tuple[str, Any]]:
    seen: dict[int, tuple[str, Any]] = {}
    for m in modules:
        for name, p in m.named_parameters():
            if p.requires_grad:
                seen.setdefault(id(p), (f"{type(m).__name__}.{name}", p))
    return list(seen.values())


def grad_pairs(ref: list[Any], cand: list[Any]) -> tuple[list[Any], list[Any]]:
    """The gradients both sides have, paired by position."""
    pairs = [(x, y) for x, y in zip(ref, cand, strict=True)
             if x is not None and y is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _two_calls(call: Callable[[], Any], device: str, params: list[Any] | None = None,
               seed: int = SEED, calls: int = 2) -> tuple[list[Any], list[Any]]:
    """Two calls (or `calls`) from `seed`: their outputs, and `params`' gradients after
    the first."""
    import torch

    torch.manual_seed(seed)
    if device == "cuda":
        torch.cuda.manual_seed_all(seed)
    outs = [clone_tree(call())]
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params or []]
    outs += [clone_tree(call()) for _ in range(calls - 1)]
    device_sync(device)()
    return outs, grads


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
    outs, grads = _two_calls(_eager_call(ref, "running the eager reference"), device,
                             trained_params(ref.modules))
    twin = copy_workload(base.fn, base.args, base.kwargs)
    again, grads_again = _two_calls(_eager_call(twin, "running the eager reference again"),
                                    device, trained_params(twin.modules))
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
    if not any(g is not None for g in grads):
        grads = []
    rg, tg = grad_pairs(grads, grads_again) if grads else ([], [])
    grad_nondet = {m: compare([rg], [tg], m, 0.0).max_error
                   for m in ("elementwise", "relative_l2")} if rg else {}
    del twin  # before the next copy: never more than two copies of the user's model
    out_noise, grad_noise = _seed_noise(base, device, outs, grads) if grads else (0.0, 0.0)
    return Reference(ref, outs, dtype, nondet, call_s=call_s, all_zero=all_zero(outs),
                     grads=grads, grad_nondeterminism=grad_nondet,
                     grad_names=[n for n, _ in _named_trained(ref.modules)] if grads else [],
                     grad_seed_noise=grad_noise, out_seed_noise=out_noise)


def _seed_noise(base: Copied, device: str, outs: list[Any], grads: list[Any]
                ) -> tuple[float, float]:
    """How far eager's first call from another seed is from SEED's (relative L2): its
    outputs, and its gradients (the worst tensor). A fresh copy, one call."""
    other = copy_workload(base.fn, base.args, base.kwargs)
    got_outs, got = _two_calls(_eager_call(other, "running the eager reference again"),
                               device, trained_params(other.modules), seed=SEED + 1,
                               calls=1)
    out_noise = compare(outs[:1], got_outs, "relative_l2", 0.0).max_error
    if len(got) != len(grads):
        return out_noise, math.inf
    rg, og = grad_pairs(grads, got)
    return out_noise, compare([rg], [og], "relative_l2", 0.0).max_error if rg else 0.0


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


# torch's own words for a CUDA graph trees failure (reduce-overhead, max-autotune) that is
# its open bug, not the candidate's: said so beside them
_TREES_LIVENESS = "graph recording observed an input tensor deallocate"
TREES_LIVENESS_NOTE = ("a known CUDA graph trees failure in torch (pytorch/pytorch#154306: "
                       "a tensor that died while the graph was recorded lived at a replay)")


def failure_reason(exc: BaseException) -> str:
    """The candidate's failure as its reason shows it: the exception's first line, and
    what is known of it."""
    said = first_line(exc)
    return f"{said} ({TREES_LIVENESS_NOTE})" if _TREES_LIVENESS in str(exc) else said


def warm_up(cand: Candidate, sync: Callable[[], None], deadline: float, t0: float) -> None:
    """Prepare (compile options, capture) and make the WARM_CALLS warm calls, checking
    the deadline between calls; `t0`: when the preparation began (for the message).
    Tensors print short meanwhile (guard_repr.py: dynamo 2.10-2.11 formats each tensor
    it guards, seconds of a training step's compile)."""
    with switches_on(cand), short_tensor_repr():
        for prep in cand.prepare:
            prep(cand)
        for i in range(WARM_CALLS):
            cand.call()
            sync()
            # the first call compiles (or autotunes): it cannot be interrupted
            _in_time(deadline, f"preparing (warm call {i + 1} of {WARM_CALLS}, "
                               f"{time.perf_counter() - t0:.1f} s in)")


def _grads_wrong(ref: Reference, grads: list[Any], precision: str | None,
                 res: RemedyResult) -> str:
    """Why the candidate's gradients (after its first call) are not the reference's,
    tensor by tensor (module docstring); "" where they are, or where there is nothing to
    compare (no trained parameter, a different set of them, eager too noisy to judge:
    the check's row in res.checks says which)."""
    if not ref.grads:
        return ""
    if len(grads) != len(ref.grads):
        res.checks["grads"] = {"skipped": f"{len(grads)} trained parameters, the "
                                          f"reference has {len(ref.grads)}"}
        return ""
    rg, cg = grad_pairs(ref.grads, grads)
    if not rg:
        res.checks["grads"] = {"skipped": "no parameter has a gradient on both sides"}
        return ""
    tol = grad_tolerance(out_dtype(rg), precision, ref.grad_nondeterminism)
    if tol.unverifiable:
        res.checks["grads"] = {"unverifiable": tol.unverifiable}
        return ""
    got = compare([rg], [cg], tol.measure, tol.rtol, tol.min_cosine)
    res.checks["grads"] = {"ok": got.ok, "tensors": len(rg), "max_error": got.max_error,
                           "tolerance": got.tolerance, "cosine_min": got.cosine}
    if got.ok:
        return ""
    if ref.grad_seed_noise > tol.rtol:  # it may only draw its random numbers otherwise
        res.checks["grads"]["unverifiable"] = (
            f"the step's gradients hang on its random draws (dropout?): eager under "
            f"another seed differs by {ref.grad_seed_noise:.3g} (relative L2), over the "
            f"{tol.rtol:g} tolerance; this candidate's {got.max_error:.3g} cannot tell "
            "draws made another way from a wrong gradient: its outputs judge it")
        return ""
    return f"gradients after the first call: {got.reason}{_worst(ref, grads, tol.measure)}"


def _drawn_otherwise(ref: Reference, error: float, tol: Tolerance) -> str:
    """Why outputs that miss the tolerance cannot be called wrong, where eager's own
    outputs from another seed miss it too (a training step under dropout: a compiled
    step draws its random numbers otherwise, and its loss moves as another seed's
    does); "" where they do not hang on the draws. The candidate is then timed but never
    a winner, as gradients that hang on them are judged by the outputs (`_grads_wrong`):
    here nothing is left to judge it. On this project's CPU GPT-2's fp32 training step
    compiled missed 1e-4 by 0.0021-0.0079 and was called wrong."""
    if ref.out_seed_noise <= tol.rtol:
        return ""
    return (f"the step's outputs hang on its random draws (dropout?): eager under another "
            f"seed differs by {ref.out_seed_noise:.3g} (relative L2), over the {tol.rtol:g} "
            f"tolerance; this candidate's {error:.3g} ({tol.measure}) cannot tell draws "
            "made another way from a wrong output")


def _worst(ref: Reference, grads: list[Any], measure: str) -> str:
    """" (furthest off: NAME, error E)" for the message."""
    errors = [(compare([[r]], [[c]], measure, math.inf).max_error, name)
              for name, r, c in zip(ref.grad_names, ref.grads, grads, strict=True)
              if r is not None and c is not None]
    err, name = max(errors)
    return f" (furthest off: {name}, {err:.3g})"


def _abandoned(res: RemedyResult, exc: OutOfTime) -> tuple[RemedyResult, None]:
    res.status, res.reason = "skipped", f"abandoned: {exc}"
    return res, None


def time_ab(cand: Candidate, ref: Reference, device: str, ab_budget_s: float,
            deadline: float = math.inf) -> ABResult:
    """The candidate against the eager reference, interleaved (verify.ab_time): every
    A/B figure of the search, and a row timed again (quiet.py)."""
    return ab_time(lambda: ref.work.fn(*ref.work.args, **ref.work.kwargs), cand.call,
                   device=device, budget_s=ab_budget_s,
                   b_context=lambda: switches_on(cand), deadline=deadline)


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
        res.reason = f"{'preparing' if cand.prepare else 'applying'}: {failure_reason(exc)}"
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
            outs, grads = _two_calls(cand.call, ctx.device,
                                     trained_params(cand.modules) if ref.grads else None)
    except OutOfTime as exc:
        return _abandoned(res, exc)
    except Exception as exc:  # noqa: BLE001
        res.reason = f"running: {failure_reason(exc)}"
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
        drawn = "" if cmp.ok else _drawn_otherwise(ref, cmp.max_error, tol)
        if not cmp.ok and not drawn:
            res.status, res.reason = "rejected", "; ".join([cmp.reason, *notes])
            return res, None
        unverifiable = drawn
        wrong = "" if drawn else _grads_wrong(
            ref, grads, cand.precision or ctx.reference_precision, res)
        if wrong:
            res.verified = False
            res.status, res.reason = "rejected", wrong
            return res, None
    try:
        ab = time_ab(cand, ref, ctx.device, ab_budget_s, deadline)
    except OutOfTime as exc:
        return _abandoned(res, exc)
    except Exception as exc:  # noqa: BLE001
        res.reason = f"timing: {failure_reason(exc)}"
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

"""`gobrrr optimize`: diagnose, then every applicable remedy on its own, then the
compatible combinations of the winners within the time budget; the best verified
configuration, predicted vs measured for each, and the code to apply the winner.

The user's objects are never run by a remedy: the base is rebuilt from the workload's
factory when it has one (a fresh, independent instance) or deep-copied from it
(copying.py), primed with one eager call (lazy optimizer state, gradients), and every
candidate and the reference are copies of that base. The whole run also sits inside
state.preserved_state, which restores everything of the user's the workload reaches.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from typing import Any

from gobrrr.errors import WARNING
from gobrrr.remedies import catalog
from gobrrr.remedies.base import Candidate, Context, RemedyResult, RemedySpec, switches_on
from gobrrr.remedies.evaluate import Reference, evaluate, make_reference
from gobrrr.remedies.result import NONFINITE_REFERENCE, OptimizeResult
from gobrrr.state import Copied, copy_workload, describe, preserved_state, stateful_ids
from gobrrr.workload import Workload

__all__ = ["optimize_workload"]

Progress = Callable[[str], None]
_MAX_COMBINATIONS = 12


def _base(w: Workload, notes: list[str]) -> tuple[Copied, bool]:
    """(primed base, independent of the user's objects)."""
    if w.factory is not None and w.batch_size is not None:
        fresh = w.scaled(1)  # the factory again: a new, independent instance
        base = describe(fresh.fn, fresh.args, fresh.kwargs)
    else:
        base = copy_workload(w.fn, w.args, w.kwargs)
    shared = stateful_ids(w.fn, w.args, w.kwargs) & stateful_ids(base.fn, base.args,
                                                                 base.kwargs)
    if shared:
        notes.append(f"{len(shared)} object(s) of the workload could not be copied (state "
                     "reachable only indirectly): remedies that change modules or "
                     "optimizers are skipped")
    return base, not shared


def _prime(base: Copied, w: Workload) -> list[bool]:
    """One eager call of the base (creates lazy optimizer state and gradients), with a
    spy on optimizer.zero_grad to learn how the step calls it."""
    calls: list[bool] = []
    for o in base.optimizers:
        bound = o.zero_grad

        def spy(set_to_none: bool = True, _bound: Any = bound) -> None:
            calls.append(set_to_none)
            _bound(set_to_none=set_to_none)

        o.zero_grad = spy
    try:
        Workload(w.name, base.fn, base.args, base.kwargs, w.device).run("priming a copy")
    finally:
        for o in base.optimizers:
            del o.zero_grad  # the class's method again: copies must not carry the spy
    return calls


def _graph_breaks(base: Copied) -> dict[str, Any]:
    """torch._dynamo.explain on a throwaway copy: graphs and the reasons for breaks."""
    import torch._dynamo

    probe = copy_workload(base.fn, base.args, base.kwargs)
    try:
        ex = torch._dynamo.explain(probe.fn)(*probe.args, **probe.kwargs)
    except Exception as exc:  # noqa: BLE001 - explain failing is itself a finding
        return {"explain_error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    finally:
        torch._dynamo.reset()
    reasons = [str(getattr(r, "reason", r)).splitlines()[0][:160] for r in ex.break_reasons]
    return {"graphs": ex.graph_count, "graph_breaks": ex.graph_break_count,
            "break_reasons": reasons[:5]}


def _combine_predicted(results: list[RemedyResult]) -> float | None:
    """Savings of the parts add (each from its own share of the budget)."""
    if any(r.predicted_speedup is None for r in results):
        return None
    saved = sum(1 - 1 / (r.predicted_speedup or 1) for r in results)
    return 1 / (1 - saved) if saved < 0.99 else None


def _combinations(winners: list[tuple[RemedySpec, RemedyResult]]) -> list[list[RemedySpec]]:
    """Subsets (2 or more) of the best winner per group, most promising first."""
    best: dict[str, tuple[RemedySpec, RemedyResult]] = {}
    for spec, res in winners:
        if spec.group not in best or (res.measured_speedup or 0) > (
                best[spec.group][1].measured_speedup or 0):
            best[spec.group] = (spec, res)
    picks = list(best.values())
    combos = [c for k in range(len(picks), 1, -1) for c in itertools.combinations(picks, k)]
    combos.sort(key=lambda c: -math.prod(r.measured_speedup or 1 for _, r in c))
    return [[s for s, _ in c] for c in combos[:_MAX_COMBINATIONS]]


def optimize_workload(w: Workload, *, report: Any = None, diagnose: bool = True,
                      budget_s: float = 120.0, only: list[str] | None = None,
                      ab_budget_s: float = 1.5, time_budget_s: float = 1.0,
                      compile_backend: str = "inductor",
                      extra_specs: list[RemedySpec] | None = None,
                      progress: Progress | None = None) -> OptimizeResult:
    """Predict, apply, verify and rank the remedies for `w` (see module docstring)."""
    import torch

    say = progress or (lambda _m: None)
    t_start = time.perf_counter()
    specs = catalog.select(only) + list(extra_specs or [])
    if report is None and diagnose:
        from gobrrr.api import diagnose_workload

        say("diagnosing first: the predictions come from its budget")
        report = diagnose_workload(w, time_budget_s=time_budget_s, progress=say)
    notes: list[str] = []
    deadline = time.perf_counter() + budget_s
    with preserved_state(w) as state:
        base, independent = _base(w, notes)
        zero_calls = _prime(base, w)
        if report is not None:
            records = report.counts.records
        else:
            from gobrrr.counting import count

            # the user's exception as a WorkloadError: their traceback, exit 2
            records = count(Workload(w.name, base.fn, base.args, base.kwargs,
                                     w.device).run, "counting a copy").records
        ctx = Context(w.device, report, {type(m).__name__ for top in base.modules
                                         for m in top.modules()},
                      base.optimizers, zero_calls, independent, records, compile_backend)
        ctx.reference_precision = _reference_precision(ctx)
        if ctx.reference_precision:
            notes.append("eager already runs fp32 matmuls/convolutions in TF32 here "
                         "(torch.backends flags): outputs are compared at TF32 tolerance")
        say("reference: eager, twice from the same state")
        ref = make_reference(base, w.device)
        if ref.nonfinite:
            say(f"{WARNING}{NONFINITE_REFERENCE}: {ref.nonfinite}")
        results, best_cand, best_res = _run_all(specs, base, ref, ctx, ab_budget_s,
                                                deadline, say, notes)
        compiling = {s.name for s in specs if s.family in ("compile", "attention")}
        if any(set(r.components) & compiling and r.status != "not applicable"
               for r in results):
            torch._dynamo.reset()  # drop gobrrr's variants (their memory, their guards)
            notes.append("torch.compile's caches were reset (torch._dynamo.reset()) to "
                         "compile each variant from a clean state: functions you had "
                         "compiled before compile again on their next call")
    notes = [f"{WARNING}{line}" for line in state.warnings] + notes
    return OptimizeResult.build(w, report, results, best_res, best_cand, specs, ref,
                                notes, time.perf_counter() - t_start)


def _reference_precision(ctx: Context) -> str | None:
    from gobrrr.settings import tf32_enabled

    if ctx.device != "cuda":
        return None
    fp32 = [r for r in ctx.records if r.dtype == "fp32"]
    convs = any(r.op_class == "conv" for r in fp32)
    mms = any(r.op_class == "matmul" for r in fp32)
    if (convs and tf32_enabled("conv")) or (mms and tf32_enabled("matmul")):
        return "tf32"
    return None


def _run_all(specs: list[RemedySpec], base: Copied, ref: Reference, ctx: Context,
             ab_budget_s: float, deadline: float, say: Progress,
             notes: list[str]) -> tuple[list[RemedyResult], Candidate | None,
                                        RemedyResult | None]:
    results: list[RemedyResult] = []
    best_cand: Candidate | None = None
    best_res: RemedyResult | None = None
    breaks: dict[str, Any] | None = None
    winners: list[tuple[RemedySpec, RemedyResult]] = []

    def keep(res: RemedyResult, cand: Candidate | None) -> None:
        nonlocal best_cand, best_res
        results.append(res)
        if cand is not None and res.status == "verified" and (
                best_res is None or (res.measured_speedup or 0) > (
                    best_res.measured_speedup or 0)):
            best_cand, best_res = cand, res

    for spec in specs:
        predicted, basis = spec.predict(ctx)
        res = RemedyResult(spec.name, spec.regime, "not applicable", "", predicted, basis,
                           components=(spec.name,), snippet=spec.snippet)
        why_not = spec.applies(ctx)
        if why_not:
            res.reason = why_not
            keep(res, None)
            continue
        if spec.advice_only:
            res.status, res.reason = "advice", basis
            keep(res, None)
            continue
        if time.perf_counter() > deadline:
            res.status, res.reason = "not applicable", "skipped: --budget-s spent"
            keep(res, None)
            continue
        say(f"remedy {spec.name}: apply to a copy, verify, time A/B")
        if spec.family in ("compile", "attention") and breaks is None:
            breaks = _graph_breaks(base)
        got, cand = evaluate([spec], base, ref, ctx, ab_budget_s)
        got.predicted_speedup, got.prediction_basis = predicted, basis
        got.snippet = spec.snippet
        if spec.family in ("compile", "attention") and breaks:
            got.checks.update(breaks)
        keep(got, cand)
        if got.status == "verified":
            winners.append((spec, got))
    by_name = {r.name: r for r in results}
    for combo in _combinations(winners):
        if time.perf_counter() > deadline:
            notes.append("combinations stopped: --budget-s spent")
            break
        name = "+".join(s.name for s in combo)
        say(f"combination {name}")
        got, cand = evaluate(combo, base, ref, ctx, ab_budget_s)
        got.predicted_speedup = _combine_predicted([by_name[s.name] for s in combo])
        got.prediction_basis = "savings of the parts added"
        got.snippet = "\n".join(s.snippet for s in sorted(combo, key=lambda s: s.stage))
        keep(got, cand)
    return results, best_cand, best_res


def best_callable(cand: Candidate | None, ref: Reference) -> Callable[..., Any]:
    """A callable running the best configuration on gobrrr's copy of the model. With
    no arguments it calls the copy's own inputs; with arguments, a captured CUDA graph
    copies them into its static inputs (same shapes) before replaying."""
    import torch

    if cand is None:
        work = ref.work
        return lambda *a, **k: work.fn(*(a or work.args), **(k or work.kwargs))
    c = cand

    def run(*args: Any, **kwargs: Any) -> Any:
        with switches_on(c):
            if c.replay is None:
                return c.fn(*(args or c.args), **(kwargs or c.kwargs))
            for new, static in zip(args, c.args, strict=False):
                if isinstance(new, torch.Tensor) and isinstance(static, torch.Tensor):
                    if new.shape != static.shape:
                        raise ValueError(f"a captured graph needs inputs of shape "
                                         f"{tuple(static.shape)}, got {tuple(new.shape)}")
                    static.copy_(new)
            return c.replay()

    return run

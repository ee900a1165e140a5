"""torch.compile: default (Inductor fuses pointwise/reduction chains: fewer bytes, fewer
launches), reduce-overhead (the same plus CUDA graphs: launch overhead gone),
max-autotune (the same plus autotuned matmul/conv kernels; CUDA graphs too).

Predictions come from the diagnose budget (report.remedies_for): fusion saves the bytes
of intermediates (bytes before / bytes after), CUDA graphs save the GPU's idle time
(T_wall -> T_gpu), on CPU compiling saves at most the Python/dispatch time. Savings of
different kinds add (they come out of different parts of the budget).

Health checks (verify.compile_problems): dynamo is reset before each variant (the
recompile-limit trap (docs/reference.md) accumulates cache entries on one code object),
graph breaks come from torch._dynamo.explain once per run, and recompiles or an eager
fallback during timing void the measurement.
"""

from __future__ import annotations

from typing import Any

from gobrrr.remedies.base import (
    STAGE_EXECUTION,
    Candidate,
    Context,
    RemedySpec,
    speedup_from_saved,
)

__all__ = ["SPECS", "combine_predictions", "compile_candidate"]


def combine_predictions(ctx: Context, prefixes: list[str]) -> tuple[float | None, str]:
    """Add the savings the report predicts for several remedies (disjoint parts of the
    budget), as one whole-workload speedup."""
    budget = ctx.budget
    if budget is None or budget.total_s <= 0:
        return None, "no diagnose budget"
    saved, parts = 0.0, []
    for prefix in prefixes:
        got = ctx.report_prediction(prefix)
        if got and got[0]:
            saved += budget.total_s * (1 - 1 / got[0])
            parts.append(f"{prefix}: {got[0]:.2f}x ({got[1]})")
    if not parts:
        return None, "the budget predicts no gain for " + " / ".join(prefixes)
    return speedup_from_saved(budget.total_s, saved), "; ".join(parts)


def compile_candidate(cand: Candidate, ctx: Context, mode: str | None) -> Candidate:
    """Compile the candidate's function (whatever wraps it: autocast) at prepare time,
    from a clean dynamo state."""
    target = cand.fn

    def prepare(c: Candidate) -> None:
        import torch
        import torch._dynamo
        from torch._dynamo.utils import counters

        torch._dynamo.reset()  # no cache entries carried over from another variant
        counters.clear()
        kwargs: dict[str, Any] = {"backend": ctx.compile_backend}
        if mode is not None and ctx.compile_backend == "inductor":
            kwargs["mode"] = mode
        c.fn = torch.compile(target, **kwargs)

    cand.prepare.append(prepare)
    cand.compile_mode = mode or "default"
    return cand


def _applies_any(ctx: Context) -> str | None:
    return None


def _applies_cuda(ctx: Context) -> str | None:
    if ctx.device != "cuda":
        return ("its CUDA graphs / GPU autotuning need CUDA (on CPU it compiles what "
                "mode='default' does, slower)")
    return None


def _predict_default(ctx: Context) -> tuple[float | None, str]:
    if ctx.device == "cuda":
        return combine_predictions(ctx, ["operator fusion"])
    return combine_predictions(ctx, ["torch.compile", "operator fusion"])


def _predict_graphs(ctx: Context) -> tuple[float | None, str]:
    return combine_predictions(ctx, ["CUDA graphs", "operator fusion"])


def _predict_autotune(ctx: Context) -> tuple[float | None, str]:
    s, basis = combine_predictions(ctx, ["CUDA graphs", "operator fusion"])
    return s, basis + "; autotuned GEMM gain not predicted (cuBLAS is near peak already)"


SPECS = [
    RemedySpec("compile", "compile", "memory", STAGE_EXECUTION, "execution",
               _applies_any, _predict_default,
               lambda c, x: compile_candidate(c, x, None),
               "step = torch.compile(step)"),
    RemedySpec("compile_reduce_overhead", "compile", "overhead", STAGE_EXECUTION,
               "execution", _applies_cuda, _predict_graphs,
               lambda c, x: compile_candidate(c, x, "reduce-overhead"),
               'step = torch.compile(step, mode="reduce-overhead")'),
    RemedySpec("compile_max_autotune", "compile", "compute", STAGE_EXECUTION, "execution",
               _applies_cuda, _predict_autotune,
               lambda c, x: compile_candidate(c, x, "max-autotune"),
               'step = torch.compile(step, mode="max-autotune")'),
]

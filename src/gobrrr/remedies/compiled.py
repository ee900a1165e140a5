"""torch.compile: default (Inductor fuses pointwise/reduction chains: fewer bytes, fewer
launches), reduce-overhead (the same plus CUDA graphs: launch overhead gone),
max-autotune (the same plus autotuned matmul/conv kernels; CUDA graphs too), and Inductor
freezing (inference: parameters become constants, what depends on them alone is folded).

Predictions come from the diagnose budget (remedies/savings.py): fusion saves the bytes
of intermediates (bytes before / bytes after), CUDA graphs save the GPU's idle time, at
most the dispatch of the ops that ran; on CPU compiling saves at most the Python/dispatch
time; on CUDA the default mode's fewer launches shorten the host's issue time and the
GPU's idle time between launches (savings.fewer_launches); autotuning is credited with
part of the matmul time above its roofline; freezing with the time of the ops that
compute from parameters alone. Savings of different kinds add (they come out of
different ops of the budget).

Health checks (verify.compile_problems): dynamo is reset before each variant (the
recompile-limit trap (docs/reference.md) accumulates cache entries on one code object),
graph breaks are dynamo's own counts while each variant compiles (no separate
torch._dynamo.explain run: on a step with an `.item()` it took ~50 s on this loaded CPU, outside
any deadline), and recompiles or an eager fallback during timing void the measurement.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gobrrr.gains import Gain
from gobrrr.remedies import nested, savings
from gobrrr.remedies.base import (
    PREP_COMPILE,
    STAGE_AFTER_EXECUTION,
    STAGE_EXECUTION,
    Candidate,
    Context,
    RemedySpec,
)
from gobrrr.settings import (
    ignored_logging_name,
    inductor_options,
    metrics_trip_on_ignored_functions,
    once_logging_functions,
    once_logging_ignored,
    tf32_advice_quiet,
)

__all__ = ["SPECS", "TRAINING_REPLAY_NOTE", "compile_candidate", "predict_default"]


def compile_candidate(cand: Candidate, ctx: Context, mode: str | None) -> Candidate:
    """Compile the candidate's function (whatever wraps it: autocast) at prepare time,
    from a clean dynamo state; a CUDA training step's repeated blocks as nested compile
    regions (remedies/nested.py)."""
    target = cand.fn
    if nested.applies(ctx):
        marked = nested.nest_blocks(cand.modules)
        if marked:
            cand.compile_info["nested_regions"] = list(marked)
            cand.notes.append(f"{', '.join(marked)} compiled as a nested compile region "
                              "(once, reused for every block)")

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
    cand.switches.append(tf32_advice_quiet)  # its first call compiles: settings.TF32_ADVICE
    if once_logging_functions() and ignored_logging_name():
        cand.switches.append(once_logging_ignored)
        cand.notes.append("transformers' Logger.warning_once/info_once skipped inside the "
                          "compiled code (dynamo's ignored logging functions): a graph "
                          "break otherwise")
    cand.compile_mode = mode or "default"
    return cand


def _applies_any(ctx: Context) -> str | None:
    return None


def _applies_cuda(ctx: Context) -> str | None:
    if ctx.device != "cuda":
        return ("its CUDA graphs / GPU autotuning need CUDA (on CPU it compiles what "
                "mode='default' does, slower)")
    return None


def _gemm_gap(ctx: Context) -> savings.Saving:
    return savings.matmul_gap(ctx, ("matmul", "conv", "attention"), "matmul/conv")


def predict_default(ctx: Context) -> Gain:
    """torch.compile's default mode: fusion; on CPU also the eager dispatch that goes
    less the compiled call's own host work (savings.compiled_call);
    on CUDA, where the generated code still launches each kernel from Python, the fewer
    launches (savings.fewer_launches)."""
    if ctx.device == "cuda":
        return savings.gain_of(ctx, savings.fusion, savings.fewer_launches,
                               host_left_s=savings.compiled_host_left_s(ctx))
    return savings.gain_of(ctx, savings.compiled_call, savings.fusion)


# A training step compiled whole breaks at its backward call and around an optimizer
# step Dynamo skips (a fused AdamW's is a torch.compiler.disable()d call): its forward
# and backward replay as separate graphs, and the frames between them run on the host
# every call. The capture modes' prediction takes every launch's issuing away
# (savings.replay_host_left_s), which such a step does not reach. On an H100 the GPT-2
# 8x256 step under reduce-overhead still issued for 10.4 ms a step around 8.5 ms of
# kernels (session aj), and its stack was predicted 7.57x and measured 4.20-4.23x
# (session ak). No quantity of the eager diagnosis was found to predict that host work,
# so the basis says what is left out rather than a constant fitted to one model.
TRAINING_REPLAY_NOTE = (
    "; a training step under torch.compile replays its forward and backward as separate "
    "graphs, and the host still runs the frames between them (the backward call, an "
    "optimizer step Dynamo skips) every call: that host work is not counted, so this is "
    "an upper bound")


def _capture_note(ctx: Context, gain: Gain) -> Gain:
    """The capture modes' gain, with TRAINING_REPLAY_NOTE on a training step's."""
    if gain.speedup is None or not ctx.training:
        return gain
    return replace(gain, basis=gain.basis + TRAINING_REPLAY_NOTE,
                   caveat=TRAINING_REPLAY_NOTE)


def _predict_graphs(ctx: Context) -> Gain:
    return _capture_note(ctx, savings.gain_of(
        ctx, savings.replay, savings.fusion, host_left_s=savings.replay_host_left_s(ctx)))


def _predict_autotune(ctx: Context) -> Gain:
    return _capture_note(ctx, savings.gain_of(
        ctx, savings.replay, savings.fusion, _gemm_gap,
        host_left_s=savings.replay_host_left_s(ctx)))


def _predict_freezing(ctx: Context) -> Gain:
    """Applied alone it compiles in the default mode: the default's gain plus folding."""
    if ctx.device == "cuda":
        return savings.gain_of(ctx, savings.fusion, savings.fewer_launches,
                               savings.constant_folding,
                               host_left_s=savings.compiled_host_left_s(ctx))
    return savings.gain_of(ctx, savings.compiled_call, savings.fusion,
                           savings.constant_folding)


def _applies_freezing(ctx: Context) -> str | None:
    if not ctx.inference:
        return ("the workload runs a backward or an optimizer step: frozen parameters "
                "could not be trained")
    if not ctx.module_types:
        return "no nn.Module whose parameters could be frozen"
    return None


def _apply_freezing(cand: Candidate, ctx: Context) -> Candidate:
    """Freezing is an option of Inductor's compile: the default compile when no compile
    remedy came before it (stage order), Inductor's freezing flag held around the
    compile and every call."""

    if cand.compile_mode is None:
        if any(getattr(p, "__name__", "") == "capture" for p in cand.prepare):
            raise RuntimeError("freezing needs torch.compile, not a captured CUDA graph")
        cand = compile_candidate(cand, ctx, None)
    cand.switches.append(lambda: inductor_options(freezing=True))
    return cand


_DEFAULT = "step = torch.compile(step)"
_REDUCE_OVERHEAD = 'step = torch.compile(step, mode="reduce-overhead")'
_MAX_AUTOTUNE = 'step = torch.compile(step, mode="max-autotune")'


def _logging_lines() -> str:
    """The snippet's lines that skip transformers' once-logging in compiled code (as
    compile_candidate does), where this process has it."""
    name = ignored_logging_name()
    found = [f.__name__ for f in once_logging_functions()]
    if not name or not found:
        return ""
    quiet = ("# this torch then logs a harmless traceback per compile (its compile "
             "metrics sort that set)\n"
             'logging.getLogger("torch._dynamo.metrics_context").setLevel(logging.CRITICAL)\n'
             if metrics_trip_on_ignored_functions() else "")
    return ("import logging\n"
            "# transformers' once-logging in a forward is a graph break: skip it when "
            "compiled\n" + "".join(f"torch._dynamo.config.{name}.add(logging.Logger.{f})\n"
                                    for f in found) + quiet)


def _snippet(code: str) -> Any:
    """The compile's snippet, transformers' once-logging skipped and a training step's
    repeated blocks marked first (as compile_candidate does both)."""

    def write(ctx: Context) -> str:
        blocks = nested.snippet_lines(ctx.repeated_blocks) if nested.applies(ctx) else ""
        return _logging_lines() + blocks + code

    return write


SPECS = [
    RemedySpec("compile", "compile", "memory", STAGE_EXECUTION, "execution",
               _applies_any, predict_default,
               lambda c, x: compile_candidate(c, x, None),
               _DEFAULT, title="torch.compile",
               how="torch.compile(model): Inductor fuses pointwise and reduction chains",
               prep=PREP_COMPILE, compile_mode="default",
               snippet_for=_snippet(_DEFAULT)),
    RemedySpec("compile_reduce_overhead", "compile", "overhead", STAGE_EXECUTION,
               "execution", _applies_cuda, _predict_graphs,
               lambda c, x: compile_candidate(c, x, "reduce-overhead"),
               _REDUCE_OVERHEAD,
               title="torch.compile(mode='reduce-overhead')",
               how="torch.compile(model, mode='reduce-overhead'): fusion and CUDA graphs",
               prep=PREP_COMPILE, compile_mode="reduce-overhead",
               snippet_for=_snippet(_REDUCE_OVERHEAD)),
    RemedySpec("compile_max_autotune", "compile", "compute", STAGE_EXECUTION, "execution",
               _applies_cuda, _predict_autotune,
               lambda c, x: compile_candidate(c, x, "max-autotune"),
               _MAX_AUTOTUNE,
               title="torch.compile(mode='max-autotune')",
               how="torch.compile(model, mode='max-autotune'): also autotuned GEMM kernels "
                   "(minutes of compile)",
               prep=PREP_COMPILE, compile_mode="max-autotune",
               snippet_for=_snippet(_MAX_AUTOTUNE)),
    RemedySpec("freezing", "compile", "memory", STAGE_AFTER_EXECUTION, "freezing",
               _applies_freezing, _predict_freezing, _apply_freezing,
               "# inference only: parameters become constants of the compiled graph\n"
               "torch._inductor.config.freezing = True\n"
               "with torch.no_grad():\n    out = torch.compile(model)(x)",
               title="torch.compile + Inductor freezing (inference)",
               how="torch._inductor.config.freezing = True, then torch.compile under "
                   "no_grad (inference only)",
               prep=PREP_COMPILE, compile_mode="default", excludes=("cuda_graphs",)),
]

"""CUDA graphs: capture one call, replay it; the CPU's dispatch and launch work is done
once at capture, so an overhead-bound step runs at the speed of its kernels
(predicted from the budget: the GPU-idle time goes, at most the dispatch of the ops that
ran, n_ops x the per-op cost: host time outside PyTorch ops, a sleep or data loading,
stays; docs/reference.md, H200: MLP batch 16, 106 -> 38 us).

Optimizers are made capturable first (docs/reference.md: Adam refuses capture with
"param_groups' capturable is False"): `capturable=True` keeps the step count on the GPU,
so no host sync happens inside the step. Capture follows torch.cuda.graphs' recipe:
warm up on a side stream, then capture; inputs are the copy's own tensors (static), the
output the captured tensor (overwritten by each replay).
"""

from __future__ import annotations

from typing import Any

from gobrrr.experiments import capture_cuda_graph, make_capturable
from gobrrr.gains import Gain
from gobrrr.remedies import savings
from gobrrr.remedies.base import (
    PREP_CAPTURE,
    STAGE_EXECUTION,
    Candidate,
    Context,
    RemedySpec,
)

__all__ = ["SPEC", "make_capturable", "capture"]


def capture(c: Candidate) -> None:
    """Warm up on a side stream, capture one call, and make `c.replay` the replay."""

    graph, static_out = capture_cuda_graph(lambda: c.fn(*c.args, **c.kwargs))
    c.compile_info["cuda_graph"] = graph  # keeps the graph (and its memory pool) alive

    def replay() -> Any:
        graph.replay()
        return static_out

    c.replay = replay


def _apply(cand: Candidate, ctx: Context) -> Candidate:
    changed = make_capturable(cand.optimizers)
    if changed:
        cand.notes.append(f"{changed} optimizer param group(s) set capturable=True")
    cand.prepare.append(capture)
    return cand


def _applies(ctx: Context) -> str | None:
    return None if ctx.device == "cuda" else "CUDA graphs need a CUDA device"


def _predict(ctx: Context) -> Gain:
    return savings.gain_of(ctx, savings.replay, host_left_s=savings.replay_host_left_s(ctx))


SPEC = RemedySpec(
    "cuda_graphs", "graphs", "overhead", STAGE_EXECUTION, "execution", _applies, _predict,
    _apply,
    "# optimizers: torch.optim.Adam(params, ..., capturable=True)\n"
    "s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())\n"
    "with torch.cuda.stream(s):\n    for _ in range(3): step(*static_args)\n"
    "torch.cuda.current_stream().wait_stream(s)\n"
    "g = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n"
    "    static_out = step(*static_args)\n"
    "# each call: copy new inputs into static_args, then g.replay(); read static_out",
    title="CUDA graphs",
    how="capture the step with torch.cuda.graphs (optimizers with capturable=True) or "
        "torch.compile(mode='reduce-overhead')",
    prep=PREP_CAPTURE,
)

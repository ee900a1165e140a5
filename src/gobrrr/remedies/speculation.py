"""The compile a pre-started child begins before the search has predicted anything: a
training step's whole-step compile, the stack most likely to win, started as soon as the
child has built the workload (compile_child_main.py), while the search's process builds
it too and diagnoses it.

Why guess: a training step's compile (forward, backward and the optimizer step) is the
longest the search makes, and at --budget-s 60 it fits only when it starts before the
diagnosis ends. On the H200 (torch 2.11, issue 24, session s) the GPT-2 8x256 training
step's child was told its stack 26 s into the run, after the build and the diagnosis,
and its cold compile (43-56 s; 31 s with the repeated blocks as nested regions,
remedies/nested.py) had not finished when only the measuring was left: the row ended
at 3.02x, 57% of the hand search, whose best was bf16 autocast + fused AdamW + compile
(reduce-overhead), 5.26x. That stack is the guess: each of its cheap members that applies
to the workload, under compile_reduce_overhead. The search's own choice still decides:
where its first compile probe is another stack, the child's compile stands for it as the
background child's does (runner._compile_first_in_child), measured there only when the
probe's own compile no longer fits.

Only a training step on CUDA: an inference step's compile fits after the diagnosis (eight
of nine H200 rows, session s), and there the search's choice varies (a bf16 cast or
none, freezing or none). The guess needs the child to count the step's ops (is it a
training step, do its remedies apply), which runs the step a few times on the device
while the search's diagnosis times it there.
"""

from __future__ import annotations

from gobrrr.remedies.base import Context, RemedySpec

__all__ = ["speculative_stack", "SPECULATED", "SPECULATED_COMPILE"]

# The cheap members of the guess, each where it applies (module docstring).
SPECULATED = ("fused_optimizer", "bf16_autocast")
SPECULATED_COMPILE = "compile_reduce_overhead"


def speculative_stack(specs: list[RemedySpec], ctx: Context) -> list[str]:
    """The remedies a pre-started child compiles before being told (module docstring):
    empty where the guess does not hold (not a training step on CUDA, the compile not
    selected or not applicable)."""
    by_name = {s.name: s for s in specs}
    comp = by_name.get(SPECULATED_COMPILE)
    if ctx.device != "cuda" or not ctx.training or comp is None or comp.applies(ctx):
        return []
    return [n for n in SPECULATED
            if n in by_name and by_name[n].applies(ctx) is None] + [SPECULATED_COMPILE]

"""SDPA in place of hand-written attention: softmax(Q K^T * scale [+ mask]) V.

Written out, the [B, H, T, T] score matrix makes round trips through memory: written by
Q K^T, read and written by each scale/mask op and by the softmax, read by the second
matmul. A fused attention kernel (F.scaled_dot_product_attention: flash or
memory-efficient) keeps it on chip. Predicted: those bytes' time at the measured
(datasheet, for a trace of a GPU not calibrated here) bandwidth disappears.

When the budget found the chain's softmax instruction-bound (budget.classify: its
calibrated math explains its time, not its bytes), that time counts too: a flash kernel
does the softmax in registers, fused with the two matmuls (max, sum and rescale on tiles
that never reach memory), but it still computes one exponential per score: those stay,
at the calibrated exp rate (hardware.py; torch.exp in its own kernel, so no faster than a
fused one: what stays is an upper bound). The softmax's own bytes are then not counted in
the memory saving: its time is in the compute saving already.

Detection walks the counted ops' storage identities (counting.OpRecord reads/writes):
a matmul whose output flows, through pointwise/copy ops, into a softmax whose output a
later matmul reads. Applying: Inductor's attention pattern rewrite
(torch/_inductor/fx_passes/fuse_attention.py) replaces such patterns by SDPA inside
torch.compile; the harness confirms it fired (counters["inductor"]["fuse_attention"]),
and when it did not, the result is advice with the code to write by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gobrrr.counting import math_elements
from gobrrr.gains import Gain, gain_from_saved
from gobrrr.phases import BACKWARD
from gobrrr.remedies.base import (
    PREP_COMPILE,
    STAGE_EXECUTION,
    Candidate,
    Context,
    RemedySpec,
)
from gobrrr.remedies.compiled import compile_candidate
from gobrrr.units import fmt_s

__all__ = ["AttentionMatch", "find_attention", "SPEC", "rewrite_fired"]

_PASS_THROUGH = ("pointwise", "copy", "view")
# The softmax of SDPA's own math path (fully masked rows give 0): its bmm, softmax, bmm
# are scaled_dot_product_attention's decomposition (on CPU with dropout, on CUDA where no
# fused kernel takes the inputs), not attention the user wrote.
_SDPA_SOFTMAX = frozenset({"aten::_safe_softmax"})


@dataclass
class AttentionMatch:
    ops: list[int]  # record indices: QK^T, pointwise..., softmax, PV
    score_bytes: int  # bytes of one score-matrix tensor (softmax output)
    saved_bytes: int  # score-matrix traffic a fused kernel avoids


def find_attention(records: list[Any]) -> list[AttentionMatch]:
    """Hand-written attention chains among counted ops (in call order); a chain in the
    backward counts only beside a forward chain of the same module (`_written`)."""
    return _written(_chains(records), {r.index: r for r in records})


def _written(found: list[AttentionMatch], by_index: dict[int, Any]
             ) -> list[AttentionMatch]:
    """The chains the user's code wrote. The backward of other ops has the same shape: on
    CPU, SDPA's math path (a GPT-2 training step with dropout, HF's "sdpa" attention)
    runs its backward as bmm, mul, softmax backward, bmm, and the LM head's mm with the
    loss's log-softmax backward looked like one more (torch 2.13: 10 chains found in a
    4-layer GPT-2 whose forward wrote none, and SDPA offered to a model using it). A
    written attention's backward stays: its forward chain names the module."""
    def phase_of(m: AttentionMatch) -> str:
        return str(by_index[m.ops[-2]].phase)  # its softmax's

    written = {by_index[i].module for m in found if phase_of(m) != BACKWARD
               for i in m.ops}
    return [m for m in found if phase_of(m) != BACKWARD
            or any(by_index[i].module in written for i in m.ops)]


def _chains(records: list[Any]) -> list[AttentionMatch]:
    """Every softmax(QK^T)V-shaped chain of the counted ops, forward or backward."""
    # storage -> (stage, chain of records): stage "score" after QK^T and pointwise
    # ops on it, "probs" after the softmax
    flow: dict[int, tuple[str, list[Any]]] = {}
    out: list[AttentionMatch] = []
    for r in records:
        came = [flow[p] for p in r.reads if p in flow]
        if r.op_class == "matmul":
            probs = next((c for c in came if c[0] == "probs"), None)
            if probs is not None:
                chain = [*probs[1], r]
                sm = probs[1][-1]
                s_bytes = sum(b for _, b in sm.writes)
                pw = sum(x.bytes for x in chain[1:-2] if x.op_class == "pointwise")
                saved = 2 * s_bytes + sm.bytes + pw  # QK^T write, PV read, softmax, masks
                out.append(AttentionMatch([x.index for x in chain], s_bytes, saved))
            for ptr, _ in r.writes:  # this matmul's output may be the next scores
                flow[ptr] = ("score", [r])
            continue
        score = next((c for c in came if c[0] == "score"), None)
        if score is None:
            continue
        if r.op_class == "softmax" and r.op not in _SDPA_SOFTMAX:
            for ptr, _ in r.writes:
                flow[ptr] = ("probs", [*score[1], r])
        elif r.op_class in _PASS_THROUGH:
            for ptr, _ in r.writes:
                flow[ptr] = ("score", [*score[1], r])
    return out


def _applies(ctx: Context) -> str | None:
    if not find_attention(ctx.records):
        return "no hand-written softmax(QK^T)V attention found"
    return None


def _softmax_instructions(ctx: Context, matches: list[AttentionMatch]
                          ) -> tuple[float, float, int]:
    """(instruction-bound seconds of the chains' softmaxes, seconds of their exponentials
    at the calibrated exp rate, bytes those softmaxes move): module docstring."""
    assert ctx.budget is not None and ctx.ceilings is not None
    calls = {c.index: c for c in ctx.budget.per_call}
    recs = {r.index: r for r in ctx.records}
    instr_s = exp_s = 0.0
    sm_bytes = 0
    for m in matches:
        call, rec = calls.get(m.ops[-2]), recs.get(m.ops[-2])  # [QK^T, ..., softmax, PV]
        if call is None or rec is None or call.limit != "instruction":
            continue
        found = math_elements(rec.op, rec.flops)
        rate = ctx.ceilings.math_elems_per_s("exp", rec.dtype)
        # no calibrated exp rate: the whole math floor stays (nothing is credited for it)
        stays = found[1] / rate if found is not None and rate else call.math_floor_s
        instr_s += call.time_s
        exp_s += min(stays, call.time_s)
        sm_bytes += rec.bytes
    return instr_s, exp_s, sm_bytes


def _predict(ctx: Context) -> Gain:
    matches = find_attention(ctx.records)
    saved_bytes = sum(m.saved_bytes for m in matches)
    if ctx.budget is None or ctx.ceilings is None:
        return Gain.none(f"{len(matches)} attention(s), {saved_bytes / 1e6:.3g} MB of "
                         "score traffic (no diagnose budget to time it)")
    instr_s, exp_s, sm_bytes = _softmax_instructions(ctx, matches)
    mem_bytes = saved_bytes - sm_bytes
    saved_s = mem_bytes / ctx.ceilings.bandwidth_bytes_per_s
    basis = (f"{len(matches)} attention(s): {mem_bytes / 1e6:.3g} MB of score-matrix "
             f"traffic at the {ctx.ceilings.roof_kind} bandwidth = {fmt_s(saved_s)}")
    if instr_s > 0:
        basis += (f"; the softmax's {fmt_s(instr_s)} of instruction-bound math runs in "
                  f"registers, fused, but its exponentials stay ({fmt_s(exp_s)} at the "
                  f"calibrated exp rate): {fmt_s(instr_s - exp_s)} saved")
    return gain_from_saved(ctx.budget, {"memory": saved_s, "compute": instr_s - exp_s},
                           basis)


def rewrite_fired() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fuse_attention"])


def _apply(cand: Candidate, ctx: Context) -> Candidate:
    cand = compile_candidate(cand, ctx, None)
    cand.compile_info["require_attention_rewrite"] = True
    return cand


SPEC = RemedySpec(
    "sdpa", "attention", "memory", STAGE_EXECUTION, "execution", _applies, _predict,
    _apply,
    "# replace  att = (q @ k.transpose(-2, -1) * scale).softmax(-1) @ v  by\n"
    "att = torch.nn.functional.scaled_dot_product_attention(q, k, v, "
    "attn_mask=mask, scale=scale)",
    title="scaled_dot_product_attention",
    how="replace softmax(q @ k^T) @ v by F.scaled_dot_product_attention",
    prep=PREP_COMPILE, compile_mode="default",
)

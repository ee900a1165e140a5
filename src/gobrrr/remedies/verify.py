"""The verification harness: is a remedied copy still right, and is it really faster?

Correctness (`compare`): outputs of two consecutive calls from the same starting state
(the second call sees the first call's updates, so a training step's optimizer update is
checked too) against the eager reference.
- Same precision (compile, graphs, layout, fused optimizers): elementwise
  |c - r| <= rtol * (|r| + rms(r)), rtol by output dtype (SAME_PRECISION_RTOL). The
  rms term is a scale-aware atol: elements near zero are judged at the tensor's scale.
  fp32 1e-4 is the tolerance of torch's own compiled-vs-eager check
  (torch._dynamo.utils.same, tol=1e-4).
- Lower precision (TF32, bf16, fp16): relative L2 error ||c - r|| / ||r|| <=
  LOWER_PRECISION_RTOL; for the 2-byte formats also cosine similarity >= MIN_COSINE (the
  direction of the output kept, not only its size), reported for all. Rounding inputs
  to a format with unit roundoff u gives each product a relative error ~2u with random
  sign, so a dot product's relative error stays ~2u when accumulated in fp32: tf32
  u = 2^-11 (~1e-3), bf16 u = 2^-8 (~8e-3); the limits give a few layers of headroom.
- NaN or inf in a candidate's output never passes. Integer/bool outputs must match.
- Eager is run twice from the same state; if it differs from itself by more than the
  tolerance, the outputs are judged by relative L2 at twice eager's own difference (room
  for the noise of both sides), but never above NOISE_CEILING of the output dtype: beyond
  it a match proves nothing and the remedy is "unverifiable", never "verified".
Speed (`ab_time`): reference and candidate alternate in blocks (ABBA), each block
synchronized; the speedup is the median of per-round ratios with a bootstrap 95%
interval. A change is significant only when the interval excludes 1 and the median moves
by at least MIN_CHANGE; otherwise "no significant change".
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gobrrr.coordinator import SOLO, Coordinator
from gobrrr.timing import device_sync

__all__ = ["Comparison", "ABResult", "Tolerance", "compare", "tolerance_for",
           "tolerance_given_noise", "ab_time", "DynamoSnapshot", "dynamo_snapshot",
           "compile_problems", "bootstrap_median", "SAME_PRECISION_RTOL",
           "LOWER_PRECISION_RTOL", "NOISE_CEILING", "MIN_CHANGE", "MIN_COSINE",
           "OutOfTime", "AB_MIN_ROUNDS", "AB_BLOCK_S", "AB_BUDGET_S", "grad_tolerance"]

SAME_PRECISION_RTOL = {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2,
                       "bfloat16": 2e-2}  # bf16: 1 ulp = 2^-7 relative, twice that
# fp16 (a model cast where bf16 is unsupported) has TF32's 10-bit mantissa: its limit
LOWER_PRECISION_RTOL = {"tf32": 1e-2, "bf16": 5e-2, "fp16": 1e-2}
# A 2-byte model or autocast must also keep the output's direction. For one tensor this
# follows from the relative L2 limit (an error of relative size e turns the output by at
# most asin(e): cosine >= 0.99875 at bf16's 5e-2), so it is a second, independent check:
# it catches a relative L2 computed wrongly, or a limit grown past bf16's one day.
MIN_COSINE = {"bf16": 0.99, "fp16": 0.99}
# The most a tolerance may grow to cover eager's own run-to-run differences, in relative
# L2, by output dtype. Each is the tolerance of the next coarser format in use: a looser
# check would also pass a remedy that silently computed in that format, so a match would
# say nothing about correctness.
NOISE_CEILING = {
    "float64": SAME_PRECISION_RTOL["float32"],  # 1e-4: fp64 silently run in fp32 passes
    "float32": LOWER_PRECISION_RTOL["tf32"],  # 1e-2: fp32 matmuls silently in TF32 pass
    "float16": LOWER_PRECISION_RTOL["bf16"],  # 5e-2: fp16 silently replaced by bf16 passes
    # 5e-2: nothing coarser is in use, so bf16 outputs keep bf16's own limit (no growth)
    "bfloat16": LOWER_PRECISION_RTOL["bf16"],
}
MIN_CHANGE = 0.02  # below 2% a "win" is within timer drift, whatever the interval says
# A/B rounds: at least this many ABBA rounds, each block at least AB_BLOCK_S long: long
# enough that a sync and the clock are noise; CPU blocks longer, so one OS/OpenMP stall
# (~8 ms on a busy 2-core machine) is diluted in one round only.
AB_MIN_ROUNDS = 8
# Each candidate's A/B timing in `gobrrr optimize`, seconds (at least AB_MIN_ROUNDS rounds).
AB_BUDGET_S = 1.5
AB_BLOCK_S = {"cpu": 10e-3, "cuda": 2e-3}


@dataclass
class Comparison:
    ok: bool
    max_error: float  # in units of the tolerance's measure (normalized error / rel L2)
    tolerance: str
    reason: str = ""
    cosine: float | None = None


def tolerance_for(dtype_name: str, precision: str | None) -> tuple[str, float]:
    """(measure, rtol): "elementwise" or "relative_l2" and its limit.

    bf16/fp16 outputs are judged by relative L2 even for same-precision remedies: a
    rewrite that keeps intermediates in fp32 (fused attention, fused norms) differs from
    eager's rounded intermediates by about the format's unit roundoff on every element,
    and the worst of millions of such elements says nothing about correctness."""
    if precision is not None:
        return "relative_l2", LOWER_PRECISION_RTOL[precision]
    if dtype_name == "bfloat16":
        return "relative_l2", LOWER_PRECISION_RTOL["bf16"]
    if dtype_name == "float16":
        return "relative_l2", LOWER_PRECISION_RTOL["tf32"]  # same 10-bit mantissa
    return "elementwise", SAME_PRECISION_RTOL.get(dtype_name, 1e-4)


@dataclass(frozen=True)
class Tolerance:
    """How a candidate's outputs are judged against the reference."""

    measure: str  # "elementwise" | "relative_l2"
    rtol: float
    note: str = ""  # how eager's own differences changed the tolerance
    unverifiable: str = ""  # why no tolerance under the ceiling can judge: nothing passes
    min_cosine: float | None = None  # 2-byte formats: the output's direction kept too


def tolerance_given_noise(dtype_name: str, precision: str | None,
                          nondeterminism: dict[str, float]) -> Tolerance:
    """`tolerance_for`, grown to cover how much eager differs from itself (by measure,
    from two eager runs from one state), up to NOISE_CEILING of the output dtype."""
    measure, rtol = tolerance_for(dtype_name, precision)
    cos = MIN_COSINE.get(precision or "")
    noise = nondeterminism.get(measure, 0.0)
    if noise <= rtol:
        return Tolerance(measure, rtol, min_cosine=cos)
    # Eager's noisiest element now sets any elementwise maximum, which then says nothing:
    # judge the whole output by relative L2, with room for the noise of both sides (2x).
    noise_l2 = nondeterminism.get("relative_l2", math.inf)
    needed = max(rtol, 2 * noise_l2)
    ceiling = max(NOISE_CEILING.get(dtype_name, NOISE_CEILING["float32"]), rtol)
    if needed > ceiling:
        return Tolerance(measure, rtol, min_cosine=cos, unverifiable=(
            f"eager differs from itself by {noise_l2:.3g} (relative L2): a tolerance of "
            f"{needed:.3g} would be needed, above the {ceiling:g} ceiling for {dtype_name} "
            "outputs"))
    return Tolerance("relative_l2", needed, min_cosine=cos, note=(
        f"eager differs from itself by {noise:.3g} ({measure}): judged by relative L2 <= "
        f"{needed:.3g} instead (ceiling {ceiling:g})"))


def grad_tolerance(dtype_name: str, precision: str | None,
                   nondeterminism: dict[str, float]) -> Tolerance:
    """How a training step's gradients are judged (evaluate.py): each tensor by relative
    L2, at the limit `tolerance_for` gives its dtype and precision, grown to twice eager's
    own relative L2 noise, up to NOISE_CEILING. Never elementwise: a compiled backward
    reorders its reductions, and the worst of a gradient's elements against its small
    ones says nothing (on the H200, GPT-2's compiled gradients were within 2e-6 of the
    largest element of each tensor, some 1e-4 of the tensor's rms)."""
    rtol = tolerance_for(dtype_name, precision)[1]
    cos = MIN_COSINE.get(precision or "")
    needed = max(rtol, 2 * nondeterminism.get("relative_l2", 0.0))
    ceiling = max(NOISE_CEILING.get(dtype_name, NOISE_CEILING["float32"]), rtol)
    if needed > ceiling:
        return Tolerance("relative_l2", rtol, min_cosine=cos, unverifiable=(
            f"eager's gradients differ from themselves by "
            f"{nondeterminism['relative_l2']:.3g} (relative L2), above the {ceiling:g} "
            f"ceiling for {dtype_name}"))
    return Tolerance("relative_l2", needed, min_cosine=cos)


def _leaves(out: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(out)[0]


def _tensor_error(r: Any, c: Any, measure: str) -> tuple[float, float | None, str]:
    """(error, cosine, problem) of one tensor pair."""
    import torch

    if r.shape != c.shape:
        return math.inf, None, f"shape {tuple(c.shape)} != reference {tuple(r.shape)}"
    if not (r.is_floating_point() or r.is_complex()):
        same = torch.equal(r.cpu(), c.cpu().to(r.dtype))
        return (0.0 if same else math.inf), None, "" if same else "integer outputs differ"
    # on the reference's device: a 1 GiB output compared on the host takes seconds
    r64 = r.detach().double()
    c64 = c.detach().to(device=r.device, dtype=torch.float64)
    if not torch.isfinite(c64).all():
        return math.inf, None, "NaN or inf in the output"
    if not torch.isfinite(r64).all():
        return math.inf, None, "NaN or inf in the eager reference: nothing can be verified"
    if r64.numel() == 0:
        return 0.0, None, ""
    diff = (c64 - r64).abs()
    r_norm, c_norm = r64.norm().item(), c64.norm().item()
    cos = float((c64 * r64).sum().item() / (r_norm * c_norm)) if r_norm and c_norm else None
    if measure == "relative_l2":
        err = diff.norm().item() / r_norm if r_norm else (0.0 if diff.max() == 0 else math.inf)
        return err, cos, ""
    rms = r64.pow(2).mean().sqrt().item()
    denom = r64.abs() + (rms if rms > 0 else 1.0)
    return float((diff / denom).max().item()), cos, ""


def compare(ref: list[Any], cand: list[Any], measure: str, rtol: float,
            min_cosine: float | None = None) -> Comparison:
    """Compare lists of outputs (one per call) leaf by leaf; `min_cosine`: every floating
    output's cosine similarity must reach it too."""
    import torch

    desc = (f"elementwise rtol {rtol:g} (scale-aware)" if measure == "elementwise"
            else f"relative L2 <= {rtol:g}")
    if min_cosine is not None:
        desc += f", cosine >= {min_cosine:g}"
    worst, cos_min = 0.0, None
    for r_out, c_out in zip(ref, cand, strict=True):
        rl, cl = _leaves(r_out), _leaves(c_out)
        if len(rl) != len(cl):
            return Comparison(False, math.inf, desc, f"{len(cl)} outputs, reference "
                              f"has {len(rl)}")
        for r, c in zip(rl, cl, strict=True):
            if isinstance(r, torch.Tensor) and isinstance(c, torch.Tensor):
                err, cos, problem = _tensor_error(r, c, measure)
                if problem:
                    return Comparison(False, err, desc, problem)
                if cos is not None:
                    cos_min = cos if cos_min is None else min(cos_min, cos)
            elif isinstance(r, float) and isinstance(c, (int, float)):
                if not math.isfinite(c):
                    return Comparison(False, math.inf, desc, "NaN or inf in the output")
                err = abs(c - r) / (abs(r) + 1e-30) if r else abs(c)
            else:
                err = 0.0 if r == c else math.inf
            worst = max(worst, err)
    ok = worst <= rtol
    reason = "" if ok else f"error {worst:.3g} over the tolerance {rtol:g}"
    if ok and min_cosine is not None and cos_min is not None and cos_min < min_cosine:
        ok, reason = False, f"cosine similarity {cos_min:.4g} under {min_cosine:g}"
    return Comparison(ok, worst, desc, reason, cos_min)


# ---------------------------------------------------------------------- speed: A/B


class OutOfTime(Exception):
    """The deadline (--budget-s) came before a measurement could finish."""


@dataclass
class ABResult:
    speedup: float  # median over rounds of eager_time / candidate_time
    interval: tuple[float, float]
    eager_s: float
    candidate_s: float
    rounds: int
    calls_per_block: int  # eager's (the candidate's blocks are sized to its own calls)
    ratios: list[float] = field(default_factory=list)

    @property
    def change(self) -> str:
        """'faster', 'slower' or 'same' (inside the noise)."""
        lo, hi = self.interval
        if lo > 1 and self.speedup >= 1 + MIN_CHANGE:
            return "faster"
        if hi < 1 and self.speedup <= 1 - MIN_CHANGE:
            return "slower"
        return "same"


def bootstrap_median(xs: list[float], n_boot: int = 2000,
                     seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median."""
    import numpy as np

    a = np.asarray(xs, dtype=float)
    if len(a) < 2:
        return float(a[0]), float(a[0])
    rng = np.random.default_rng(seed)
    meds = np.median(a[rng.integers(0, len(a), size=(n_boot, len(a)))], axis=1)
    return float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def ab_time(a: Callable[[], Any], b: Callable[[], Any], *, device: str,
            budget_s: float = 2.0, min_rounds: int = AB_MIN_ROUNDS, max_rounds: int = 200,
            block_s: float | None = None,
            b_context: Callable[[], Any] | None = None,
            deadline: float = math.inf,
            clock: Callable[[], float] = time.perf_counter,
            coordinator: Coordinator = SOLO) -> ABResult:
    """Interleaved A/B timing of two warmed-up callables. `b_context()` is entered
    around every B block (the candidate's global switches), never around A.
    `deadline` (a `clock()` value): checked between blocks (a block is one call when a
    call is longer than `block_s`); reached before `min_rounds` it raises OutOfTime,
    after them it ends the timing like a spent budget.
    Under torchrun (`coordinator`, coordinator.py) every rank makes the same calls:
    blocks are sized from the slowest rank's calls, a round's time per side is its
    slowest rank's (a step ends when its last rank does), and every stop (the deadline,
    the budget) is rank 0's."""
    import contextlib

    sync = device_sync(device)
    ctx = b_context or contextlib.nullcontext
    coord = coordinator
    block_s = block_s if block_s is not None else AB_BLOCK_S.get(device, AB_BLOCK_S["cpu"])

    def one(f: Callable[[], Any], n: int, use_ctx: bool) -> float:
        with ctx() if use_ctx else contextlib.nullcontext():
            sync()
            t0 = clock()
            for _ in range(n):
                f()
            sync()
            return (clock() - t0) / n

    def in_time(done: int) -> bool:
        """False once the deadline has come (rank 0's clock); before min_rounds that is
        OutOfTime."""
        if coord.decide(clock() < deadline, "checking the deadline"):
            return True
        if done < min_rounds:
            raise OutOfTime(f"the --budget-s deadline came after {done} of the "
                            f"{min_rounds} A/B rounds needed")
        return False

    def calls_for(per_call_s: float) -> int:
        return max(1, min(10_000, math.ceil(block_s / max(per_call_s, 1e-7))))

    def slowest(t: float) -> float:
        return max(coord.share(t, "sharing an A/B time"))

    # Calls per block, per side: each side's blocks last about block_s, so a candidate
    # far slower than eager (or slower than its first call said) cannot make one block
    # run for seconds past the deadline; per-call times are compared, so the two sides
    # need not make the same number of calls.
    in_time(0)
    n = {"a": calls_for(slowest(one(a, 1, False)))}
    in_time(0)
    n["b"] = calls_for(slowest(one(b, 1, True)))
    ta: list[float] = []
    tb: list[float] = []
    start = clock()
    while len(ta) < max_rounds:
        got: dict[str, float] = {}
        for side in ("ab" if len(ta) % 2 == 0 else "ba"):  # ABBA: drift hits both alike
            if not in_time(len(ta)):
                break
            got[side] = one(a if side == "a" else b, n[side], side == "b")
        if len(got) < 2:  # the deadline, after min_rounds: the half round is dropped
            break
        got = {side: slowest(t) for side, t in sorted(got.items())}
        for side, t in got.items():
            if t * n[side] > 2 * block_s:  # calls slower than sized for
                n[side] = calls_for(t)
        ta.append(got["a"])
        tb.append(got["b"])
        if len(ta) >= min_rounds and coord.decide(clock() - start >= budget_s,
                                                  "ending the A/B rounds"):
            break
    ratios = [x / y for x, y in zip(ta, tb, strict=True) if y > 0]
    return ABResult(statistics.median(ratios), bootstrap_median(ratios),
                    statistics.median(ta), statistics.median(tb), len(ratios), n["a"],
                    ratios)


# ------------------------------------------------------------- compile health checks


@dataclass
class DynamoSnapshot:
    frames_total: int
    frames_ok: int
    unique_graphs: int
    calls_captured: int
    recompile_limit_hit: bool
    graph_breaks: int


def dynamo_snapshot() -> DynamoSnapshot:
    """Dynamo's counters now. A compiled function whose guards pass never enters the
    frame callback, so `frames_total` growing while timing means recompiles; the
    recompile-limit trap (docs/reference.md) leaves an "unimplemented" entry naming it and
    then runs the frame eagerly, silently."""
    from torch._dynamo.utils import counters

    limit_hit = any("recompile limit" in k.lower() or "cache_size_limit" in k.lower()
                    or "recompile_limit" in k.lower()
                    for k in counters.get("unimplemented", {}))
    return DynamoSnapshot(int(counters["frames"]["total"]), int(counters["frames"]["ok"]),
                          int(counters["stats"]["unique_graphs"]),
                          int(counters["stats"]["calls_captured"]), limit_hit,
                          int(sum(counters.get("graph_break", {}).values())))


def compile_problems(warm: DynamoSnapshot,
                     timed: DynamoSnapshot) -> tuple[list[str], list[str]]:
    """(problems that void the measurement, notes) from counters after warm-up and after
    timing."""
    problems: list[str] = []
    notes: list[str] = []
    if warm.recompile_limit_hit or timed.recompile_limit_hit:
        problems.append("hit dynamo's recompile limit: the frame fell back to eager "
                        "(its time is eager time, not compiled time)")
    if warm.unique_graphs == 0:
        problems.append("dynamo captured no graph: the call ran eagerly")
    recompiles = timed.frames_total - warm.frames_total
    if recompiles > 0:
        problems.append(f"recompiled {recompiles} time{'s' if recompiles > 1 else ''} "
                        "while timing (a guard failed on a later call)")
    if warm.frames_total > warm.frames_ok:
        notes.append(f"{warm.frames_total - warm.frames_ok} frame(s) not compiled "
                     "(ran eagerly)")
    return problems, notes

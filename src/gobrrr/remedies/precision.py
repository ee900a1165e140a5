"""Lower-precision math on tensor cores: TF32 for fp32 matmuls/convs, bf16 autocast, and
(inference only) the whole model cast to bf16.

Predicted from the budget: the fp32 matmul time runs at the measured tf32 or bf16 peak
instead (docs/reference.md, on an H200: fp32 51, tf32 360, bf16 ~700 TFLOP/s), the rest
of the budget unchanged; a model cast also halves the bytes of every fp32 tensor, so the
memory-bound time of fp32 ops halves. Outputs change by design, so they are verified
under the lower-precision tolerance of verify.py (relative L2 and cosine similarity).

TF32 is a global switch: it is set only while the candidate runs (around each timed
block), through gobrrr.settings, which restores the user's settings by the API they used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gobrrr.gains import Gain, gain_from_saved
from gobrrr.gemm_probe import GemmShape, shape_of
from gobrrr.remedies.autocast_flow import autocast_flow
from gobrrr.remedies.base import (
    STAGE_MUTATE,
    STAGE_PRECISION,
    Candidate,
    Context,
    RemedySpec,
)
from gobrrr.settings import tf32, tf32_enabled
from gobrrr.units import fmt_flops, fmt_num, fmt_s

__all__ = ["SPECS", "autocast_wrap", "bytes_bound_s", "cast_candidate", "cast_dtype"]

_MATMUL_CLASSES = ("matmul", "conv", "attention")
_NO_TIME = "no compute-bound fp32 matmul time in the budget"


def autocast_wrap(fn: Callable[..., Any], device: str) -> Callable[..., Any]:
    import torch

    def bf16_autocast(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            return fn(*args, **kwargs)

    return bf16_autocast


def _fp32_matmuls(ctx: Context) -> int:
    return sum(1 for r in ctx.records
               if r.op_class in _MATMUL_CLASSES and r.dtype == "fp32")


def _applies_tf32(ctx: Context) -> str | None:
    if ctx.device != "cuda":
        return "TF32 is a CUDA tensor-core format"
    if not _fp32_matmuls(ctx):
        return "no fp32 matmul or convolution to run in TF32"
    if tf32_enabled("matmul"):
        return "TF32 is already enabled"
    return None


def _slow_bf16_cpu(ctx: Context) -> str | None:
    """On a CPU whose measured bf16 matmul rate is no faster than fp32's, a reason:
    bf16 there is emulated or unaccelerated (issue 24: a bf16 cast offered on a CPU
    whose bf16 matmul ran at 0.4 GFLOP/s measured 0.66x)."""
    peaks = ctx.ceilings.peak_flops_per_s if ctx.ceilings is not None else {}
    if ctx.device != "cpu" or "bf16" not in peaks or "fp32" not in peaks:
        return None
    if peaks["bf16"] > peaks["fp32"]:
        return None
    return (f"this CPU's measured bf16 matmul rate ({fmt_flops(peaks['bf16'])}) is no "
            f"faster than fp32's ({fmt_flops(peaks['fp32'])})")


def _applies_bf16(ctx: Context) -> str | None:
    if not _fp32_matmuls(ctx):
        return "no fp32 matmul or convolution for autocast to lower"
    return _slow_bf16_cpu(ctx)


def _probed_time(ctx: Context, fmt: str, compiled: bool) -> tuple[float, float, int]:
    """(fp32 compute time of the calls whose GEMM shape was probed, that time in `fmt`
    at each shape's measured ratio, shapes used): gemm_probe.py; `compiled`: padded as
    Inductor pads unaligned shapes."""
    b = ctx.budget
    assert b is not None
    ratios = {g.shape: g.ratio(fmt, compiled) for g in b.gemm_times if g.fp32_s > 0}
    if not ratios:
        return 0.0, 0.0, 0
    records = {r.index: r for r in ctx.records}
    old_s = new_s = 0.0
    used: set[GemmShape] = set()
    for c in b.per_call:
        r = records.get(c.index)
        if c.regime != "compute" or r is None or r.dtype != "fp32":
            continue
        shape = shape_of(r.op, r.out_shape, r.flops)
        if shape is not None and shape in ratios:
            old_s += c.time_s
            new_s += c.time_s * ratios[shape]
            used.add(shape)
    return old_s, new_s, len(used)


def _matmul_saving(ctx: Context, slow_s: float, rate: float, fmt: str,
                   what: str, compiled: bool = False) -> tuple[float, str]:
    """Seconds saved running `slow_s` of fp32 matmul time in `fmt`: the calls whose shape
    was timed at its measured ratio, the rest at the peaks' ratio `rate`; `compiled`:
    the shapes as Inductor pads them (gemm_probe.py)."""
    probed_s, probed_new_s, n = _probed_time(ctx, fmt, compiled)
    probed_s = min(probed_s, slow_s)
    rest_s = slow_s - probed_s
    saved = max(0.0, probed_s - probed_new_s) + rest_s * (1 - 1 / rate)
    if n == 0:
        return saved, f"{what} at {rate:.1f}x the rate"
    speed = probed_s / probed_new_s if probed_new_s > 0 else float("inf")
    padded = " (unaligned ones padded, as torch.compile pads them)" if compiled else ""
    basis = (f"{fmt_s(probed_s)} of it in {n} GEMM shape(s) timed here in {fmt}"
             f"{padded}: {speed:.1f}x faster")
    if rest_s > 0:
        basis += f", the other {fmt_s(rest_s)} at the peaks' {rate:.1f}x"
    return saved, f"{what}: {basis}"


def _with_compiled(eager: Gain, compiled: Gain) -> Gain:
    """The eager gain, carrying the compiled one (Gain.under_compile) where padding the
    unaligned GEMMs saves more."""
    if (compiled.speedup or 0.0) > (eager.speedup or 0.0):
        return replace(eager, under_compile=compiled)
    return eager


def _tf32_gain(ctx: Context, compiled: bool) -> Gain:
    b, ceil = ctx.budget, ctx.ceilings
    if b is None or ceil is None:
        return Gain.none("no diagnose budget")
    peaks = ceil.peak_flops_per_s
    fp32_s = b.compute_s_by_unit.get("fp32", 0.0)
    if fp32_s <= 0 or "tf32" not in peaks:
        return Gain.none(_NO_TIME)
    rate = peaks["tf32"] / peaks["fp32"]
    saved, basis = _matmul_saving(ctx, fp32_s, rate, "tf32",
                                  f"fp32 matmul time {fmt_s(fp32_s)}", compiled)
    if not b.gemm_times:
        basis += f" ({ceil.roof_kind} tf32 / fp32 peaks)"
    return gain_from_saved(b, {"compute": saved}, basis)


def _predict_tf32(ctx: Context) -> Gain:
    return _with_compiled(_tf32_gain(ctx, False), _tf32_gain(ctx, True))


def _bf16_compute(ctx: Context, compiled: bool = False) -> tuple[float, str]:
    """(seconds saved, basis) running the fp32/tf32 matmul time at the bf16 peak;
    `compiled`: the probed shapes as Inductor pads them."""
    b, ceil = ctx.budget, ctx.ceilings
    assert b is not None and ceil is not None
    peaks = ceil.peak_flops_per_s
    fp32_s = b.compute_s_by_unit.get("fp32", 0.0)
    slow_s = fp32_s + b.compute_s_by_unit.get("tf32", 0.0)
    if slow_s <= 0 or "bf16" not in peaks:
        return 0.0, _NO_TIME
    from_peak = peaks["tf32"] if "tf32" in peaks and fp32_s == 0 else peaks["fp32"]
    if peaks["bf16"] <= from_peak:
        return 0.0, "the measured bf16 peak is no faster than fp32 here"
    rate = peaks["bf16"] / from_peak
    if b.gemm_times and fp32_s > 0:
        # the shapes were timed from fp32 (TF32 off): the tf32 part keeps the peaks'
        saved, basis = _matmul_saving(ctx, fp32_s, rate, "bf16",
                                      f"fp32 matmul time {fmt_s(fp32_s)} in bf16", compiled)
        tf32_s = slow_s - fp32_s
        if tf32_s > 0 and "tf32" in peaks and peaks["bf16"] > peaks["tf32"]:
            saved += tf32_s * (1 - peaks["tf32"] / peaks["bf16"])
            basis += f"; tf32 matmul time {fmt_s(tf32_s)} at the peaks' ratio"
        return saved, basis
    return slow_s * (1 - 1 / rate), (f"fp32/tf32 matmul time {fmt_s(slow_s)} at the "
                                     f"{ceil.roof_kind} bf16 rate ({rate:.1f}x)")


def _autocast_gain(ctx: Context, compiled: bool) -> Gain:
    """Eager: the matmul time at the bf16 rate, the memory-bound ops that would run in
    bf16 at half their time, and the casts autocast adds (autocast_flow.py): each a
    kernel (its bytes at the measured bandwidth, at least the call's shortest
    memory-bound op) and a dispatch on the host (the calibrated cost of a tiny op).
    `compiled`: the matmul time and the halving, without the casts (Inductor fuses them
    into their neighbours). The halving stays: the compile's fusion estimate counts the
    fp32 bytes of the chains it fuses (savings.fusion), and what fusion leaves still
    moves in bf16; the two savings come out of the memory part, each of what the other
    leaves (gains.combine). Without it, on an H100 (session ae) ResNet-50 b256's
    channels_last + bf16 autocast + reduce-overhead + freezing stack was predicted 1.76x,
    below the same stack without the compile (2.03x, measured 2.04x), and measured 3.25x:
    its fp32 NCHW convolutions were memory-bound, 34.4 ms of its 41.4 ms, all in bf16."""
    if not ctx.diagnosed:
        return Gain.none("no diagnose budget")
    saved_s, basis = _bf16_compute(ctx, compiled)
    if saved_s <= 0:
        return Gain.none(basis)
    b, ceil = ctx.budget, ctx.ceilings
    assert b is not None and ceil is not None
    flow = autocast_flow(ctx.records, ctx.param_storages)
    memory = [c for c in b.per_call if c.regime == "memory" and c.time_s > 0]
    in_bf16 = [c for c in memory if c.index in flow.halved or c.index in flow.low]
    time_s = sum(c.time_s for c in in_bf16)
    if compiled:
        halved_s = time_s / 2
        halved = (f"{len(in_bf16)} memory-bound op(s) with every input in bf16 under "
                  f"autocast: {fmt_s(time_s)} halved")
    else:
        halved_s = sum(bytes_bound_s(c, ceil.bandwidth_bytes_per_s) for c in in_bf16) / 2
        halved = (f"{len(in_bf16)} memory-bound op(s) with every input in bf16 under "
                  f"autocast: {fmt_s(time_s)}, {fmt_s(2 * halved_s)} of it their bytes at "
                  "the measured bandwidth, halved")
    if compiled:
        parts_c = [basis + "; halves matmul bytes too"]
        if halved_s > 0:
            parts_c.append(halved + " (the casts fused into their neighbours)")
        return gain_from_saved(b, {"compute": saved_s, "memory": halved_s},
                               "; ".join(parts_c))
    shortest_s = min((c.time_s for c in memory), default=0.0)
    cast_s = sum(max(n / ceil.bandwidth_bytes_per_s, shortest_s) for n in flow.cast_bytes)
    host_s = flow.casts * ceil.op_overhead_s
    saved = {"compute": saved_s, "memory": halved_s - cast_s}
    parts = [basis]
    if halved_s > 0:
        parts.append(halved)
    if flow.casts:
        parts.append(f"{flow.casts} cast(s) autocast adds (fp32 inputs of matmuls, bf16 "
                     f"inputs of fp32 ops: {fmt_num(sum(flow.cast_bytes), 'B')}): "
                     f"{fmt_s(cast_s)} of kernels, {fmt_s(host_s)} of dispatch "
                     f"({fmt_s(ceil.op_overhead_s)} each)")
    if b.host_issue_s is None:  # no issue time measured to raise
        if ctx.device == "cpu":  # the CPU runs each dispatch itself: it adds time
            saved["overhead"] = -host_s
        host_s = 0.0  # a GPU without it: whether the host hides it is not known
    return gain_from_saved(b, saved, "; ".join(parts), host_added_s=host_s)


def _predict_autocast(ctx: Context) -> Gain:
    """The eager gain (None where the casts cost more than the bf16 math saves), with the
    compiled one for a stack that compiles (Gain.under_compile)."""
    eager, compiled = _autocast_gain(ctx, False), _autocast_gain(ctx, True)
    if compiled.speedup is None:
        return eager
    if eager.speedup is None:
        eager = replace(eager, basis=f"{eager.basis}: no gain in eager (under "
                        f"torch.compile, without the casts: {compiled.speedup:.2f}x)")
    return replace(eager, under_compile=compiled)


def bytes_bound_s(c: Any, bandwidth_bytes_per_s: float) -> float:
    """The part of a memory-bound call's time (budget.CallRow) that its bytes take at the
    measured bandwidth: what 2-byte tensors halve. The rest is a kernel's latency, launch
    and occupancy, which they do not shorten. A call of unknown bytes keeps its whole
    time. On an H100 (session ag) ResNet-50 at batch 1 spent 777 us in memory-bound
    kernels whose bytes take 137 us: halving all of it predicted its CUDA-graph replay
    1.78x faster in bf16 (7.43x against 4.18x for the fp32 replay); the bf16 replay
    measured 1.2x slower (4.96x against 6.02x). GPT-2 at 1x1's bf16 replay measured
    1.1-1.45x faster than fp32's, its weights' 0.5 GB about 170 us of its 846 us replay."""
    if c.bytes <= 0 or bandwidth_bytes_per_s <= 0:
        return float(c.time_s)
    return min(float(c.time_s), c.bytes / bandwidth_bytes_per_s)


def _fp32_memory_s(ctx: Context, compiled: bool) -> tuple[float, float]:
    """(memory-bound time of ops whose output is fp32, what halving their bytes halves
    of it): eager, the part their bytes take (bytes_bound_s); `compiled`, all of it
    (Inductor generates the memory-bound kernels anew, fused; what fusion leaves it
    moves near the bandwidth roof)."""
    assert ctx.budget is not None and ctx.ceilings is not None
    fp32 = {r.index for r in ctx.records if r.dtype == "fp32"}
    calls = [c for c in ctx.budget.per_call if c.regime == "memory" and c.index in fp32]
    time_s = sum(c.time_s for c in calls)
    if compiled:
        return time_s, time_s
    bw = ctx.ceilings.bandwidth_bytes_per_s
    return time_s, sum(bytes_bound_s(c, bw) for c in calls)


def _cast_gain(ctx: Context, compiled: bool) -> Gain:
    if not ctx.diagnosed:
        return Gain.none("no diagnose budget")
    assert ctx.budget is not None
    compute_s, basis = _bf16_compute(ctx, compiled)
    fp32_s, bound_s = _fp32_memory_s(ctx, compiled)
    memory_s = bound_s / 2  # every fp32 tensor's bytes halve
    if compute_s <= 0 and memory_s <= 0:
        return Gain.none("no fp32 matmul or memory-bound fp32 time in the budget")
    parts = [basis] if compute_s > 0 else []
    if memory_s > 0:
        of_it = ("" if bound_s >= fp32_s else
                 f", {fmt_s(bound_s)} of it its bytes at the measured bandwidth,")
        parts.append(f"memory-bound fp32 time {fmt_s(fp32_s)}{of_it} halved (2-byte "
                     "tensors)")
    return gain_from_saved(ctx.budget, {"compute": compute_s, "memory": memory_s},
                           "; ".join(parts))


def _predict_cast(ctx: Context) -> Gain:
    return _with_compiled(_cast_gain(ctx, False), _cast_gain(ctx, True))


def _apply_tf32(cand: Candidate, ctx: Context) -> Candidate:
    cand.switches.append(tf32)
    cand.precision = "bf16" if cand.precision == "bf16" else "tf32"
    return cand


def _apply_bf16(cand: Candidate, ctx: Context) -> Candidate:
    cand.fn = autocast_wrap(cand.fn, ctx.device)
    cand.precision = "bf16"
    return cand


def cast_dtype(device: str) -> Any:
    """bf16, or fp16 on a GPU without bf16 (before Ampere): both are 2-byte formats
    that run on tensor cores; bf16 keeps fp32's range, so it is the first choice."""
    import torch

    if device == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def cast_candidate(cand: Candidate, dtype: Any) -> Candidate:
    """The copy's modules (parameters and buffers) and its floating inputs in `dtype`.
    Tensors the code reaches otherwise (closures, globals) keep theirs: an op mixing the
    two fails, and the harness reports it."""
    import torch
    from torch.utils._pytree import tree_map

    def cast(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.detach().to(dtype).requires_grad_(x.requires_grad)
        return x

    for m in cand.modules:
        m.to(dtype)
    cand.args = tree_map(cast, cand.args)
    cand.kwargs = tree_map(cast, cand.kwargs)
    from torch.utils._pytree import tree_flatten

    inputs = [t for t in tree_flatten((cand.args, cand.kwargs))[0]
              if isinstance(t, torch.Tensor)]
    cand.tensors = [*cand.tensors, *inputs]  # restored in place between runs
    cand.precision = "bf16" if dtype == torch.bfloat16 else "fp16"
    return cand


def _applies_cast(ctx: Context) -> str | None:
    if not ctx.inference:
        return ("the workload runs a backward or an optimizer step: a bf16 model would "
                "train in bf16 (use bf16 autocast)")
    if not ctx.module_types:
        return "no nn.Module to cast"
    if not ctx.independent_copy:
        return "the workload's modules could not be copied apart from yours"
    if not any(r.dtype == "fp32" for r in ctx.records):
        return "no fp32 op to run in a 2-byte format"
    return _slow_bf16_cpu(ctx)


def _apply_cast(cand: Candidate, ctx: Context) -> Candidate:
    return cast_candidate(cand, cast_dtype(ctx.device))


SPECS = [
    RemedySpec("tf32", "precision", "compute", STAGE_PRECISION, "precision",
               _applies_tf32, _predict_tf32, _apply_tf32,
               'torch.set_float32_matmul_precision("high")\n'
               "torch.backends.cudnn.allow_tf32 = True", precision="tf32",
               title="TF32 matmuls", how="torch.set_float32_matmul_precision('high')"),
    RemedySpec("bf16_autocast", "precision", "compute", STAGE_PRECISION, "precision",
               _applies_bf16, _predict_autocast, _apply_bf16,
               "with torch.autocast(device_type, dtype=torch.bfloat16):\n"
               "    out = step(*args)", precision="bf16", title="bf16 autocast",
               how="with torch.autocast(device_type, dtype=torch.bfloat16): ..."),
    # STAGE_MUTATE: the copy's weights change dtype before anything wraps or compiles it
    RemedySpec("bf16_cast", "precision", "compute", STAGE_MUTATE, "precision",
               _applies_cast, _predict_cast, _apply_cast,
               "# inference only (no backward, no optimizer step):\n"
               "model = model.to(torch.bfloat16)  # torch.float16 where bf16 is unsupported\n"
               "x = x.to(torch.bfloat16)  # floating inputs to match",
               precision="bf16", title="model cast to bf16 (inference)",
               how="model.to(torch.bfloat16) and floating inputs to match (inference only)"),
]

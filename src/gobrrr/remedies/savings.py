"""What each mechanism a remedy relies on removes from the budget, in seconds per call by
budget part, with the arithmetic as a sentence. Remedies predict by adding up the
mechanisms they use (torch.compile: fusion and, on CPU, dispatch; reduce-overhead: fusion
and dispatch; ...), always through gobrrr.gains, so a doctor report and `gobrrr optimize`
give the same number for the same budget.

Each function returns (seconds by part, basis); empty seconds: nothing to remove, and the
basis says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from gobrrr.fusion_estimate import compiled_launches, fusable_bytes_saved, is_fusable
from gobrrr.gains import Gain, gain_from_saved, host_time
from gobrrr.phases import DATA_LOADING, FORWARD
from gobrrr.remedies.base import Context
from gobrrr.units import fmt_num, fmt_s

__all__ = ["Saving", "gain_of", "dispatch", "replay", "replay_host_left_s", "fusion",
           "fewer_launches", "compiled_host_left_s", "compiled_call",
           "matmul_gap", "autograd", "constant_folding", "folding_ops",
           "AUTOTUNE_GAP_SHARE", "AUTOGRAD_COST_PER_OP"]

Saving = tuple[dict[str, float], str]
# Dispatch savings below this are the rounding residue of a budget without overhead time
# (an H200 report printed "2.44e-09 us of dispatch"): none.
MIN_DISPATCH_S = 1e-9

# Autotuning (Inductor's max-autotune GEMM templates, cuDNN's benchmark mode) picks the
# fastest of several kernels for each shape; it cannot reach the roofline. We credit it
# with half of the gap between a compute-bound matmul/conv's time and its roofline floor:
# the heuristics' choice is often the fastest already (docs/reference.md: cuBLAS near peak
# on large GEMMs), so the whole gap would over-predict, and none would hide its one real
# win (small or odd shapes the heuristic gets wrong).
AUTOTUNE_GAP_SHARE = 0.5

# An op that autograd records costs about twice its dispatch: creating the node, saving
# its inputs and bumping version counters cost about as much as dispatching the op
# itself. Measured on this project's 2-core CPU (torch 2.13): a tiny mul/add on a
# requires-grad tensor 3.14 us, under no_grad 1.40 us, under inference_mode 1.05 us; the
# calibrated per-op cost (ceilings.op_overhead_s) is the no-autograd one, so the
# bookkeeping is ~1x of it per recorded op.
AUTOGRAD_COST_PER_OP = 1.0


def gain_of(ctx: Context, *mechanisms: Callable[[Context], Saving],
            host_left_s: float | None = None) -> Gain:
    """One remedy's gain from the mechanisms it uses (each removes its own ops' time, so
    their seconds add); `host_left_s`: the host's issue time the remedy leaves, where it
    says (a replay: `replay_host_left_s`; gobrrr.gains)."""
    if not ctx.diagnosed:
        return Gain.none("no diagnose budget")
    assert ctx.budget is not None
    savings = [m(ctx) for m in mechanisms]
    total: dict[str, float] = {}
    for seconds, _ in savings:
        for part, s in seconds.items():
            total[part] = total.get(part, 0.0) + s
    used = [basis for seconds, basis in savings if seconds]
    if not used:
        # A replay with no GPU-idle time to remove still leaves no issue time: beside a
        # remedy that shortens the kernels it lifts the host's floor (gains.combine). On
        # the H200 BERT-base's bf16 cast + CUDA graphs was predicted 2.57x, the cast's
        # alone (fp32 eager is device-bound: CUDA graphs alone 0.99x), and measured 4.03x.
        return Gain(None, "; ".join(basis for _, basis in savings),
                    host_left_s=host_left_s)
    gain = gain_from_saved(ctx.budget, total, "; ".join(used), host_left_s)
    # by mechanism, so a stack of two remedies sharing one (reduce-overhead and freezing:
    # fusion) counts it once (gains.combine)
    return replace(gain, by_mechanism={m.__name__: dict(seconds) for m, (seconds, _)
                                       in zip(mechanisms, savings, strict=True) if seconds})


def dispatch(ctx: Context, *, launch: bool) -> Saving:
    """The dispatch of the ops that ran (CUDA graphs, a compiled CPU graph): n_ops x the
    measured per-op cost, at most the overhead; host time outside ops stays. `launch`:
    the words for CUDA (the GPU-idle time goes) rather than CPU (Python/dispatch)."""
    b, ceil = ctx.budget, ctx.ceilings
    assert b is not None and ceil is not None
    host = host_time(b, ctx.records, ceil)
    if host.dispatch_s < MIN_DISPATCH_S:
        return {}, "no dispatch overhead in the budget"
    raw_s = host.n_ops * ceil.op_overhead_s
    each = f"{host.n_ops} ops x {fmt_s(ceil.op_overhead_s)} = {fmt_s(raw_s)} of dispatch"
    if host.dispatch_s < raw_s:  # host_time caps it at the budget's overhead
        each += f", capped at the budget's {fmt_s(host.dispatch_s)} of overhead"
    stays = (f"; {fmt_s(host.outside_s)} of host time outside PyTorch ops stays"
             if host.outside_s > 0 else "")
    if launch:
        measured = (f"; graph replay measured {ctx.graph.speedup:.2f}x"
                    if ctx.graph is not None and ctx.graph.speedup else "")
        basis = (f"T_wall {fmt_s(b.total_s)} -> {fmt_s(b.total_s - host.dispatch_s)} "
                 f"(kernel time {fmt_s(b.busy_s)}): the launch overhead goes, at most "
                 f"{each}{stays}{measured}")
    else:
        basis = (f"upper bound: {each} removed, of {fmt_s(b.overhead_s)} of "
                 f"Python/dispatch time{stays}")
    return {"overhead": host.dispatch_s}, basis


def replay(ctx: Context) -> Saving:
    """A CUDA graph's replay (CUDA graphs, torch.compile's reduce-overhead and
    max-autotune modes): what the graph-replay experiment measured when it ran, else the
    dispatch estimate (`dispatch`). The experiment captures this very call and replays
    it, the remedy's own mechanism, so the two agree (issue 24: one H200 report predicted
    11.8x from the experiment and 2.69x for the remedy; GPT-2 at batch 1 was predicted
    1.48x by dispatch counts and measured 8.89x, HF's Python between ops being host time
    outside PyTorch ops that a replay skips too). The replay keeps the kernels and the
    wait for data: its saving is capped at the overhead less the measured loading."""
    g = ctx.graph
    if g is None or not g.speedup or not g.eager_s or not g.replay_s:
        return dispatch(ctx, launch=True)
    b, ceil = ctx.budget, ctx.ceilings
    assert b is not None and ceil is not None
    host = host_time(b, ctx.records, ceil)
    removable_s = b.overhead_s - host.loading_s
    if removable_s < MIN_DISPATCH_S:
        return {}, "no GPU-idle time in the budget for a replay to remove"
    measured_s = _replay_saved_s(b.total_s, g.replay_s)
    saved_s = min(max(0.0, measured_s), removable_s)
    capped = (f", capped at the budget's {fmt_s(removable_s)} of GPU-idle time"
              if measured_s > removable_s else "")
    basis = (f"the graph-replay experiment measured {fmt_s(g.eager_s)} -> "
             f"{fmt_s(g.replay_s)} ({g.speedup:.2f}x): T_wall {fmt_s(b.total_s)} -> "
             f"{fmt_s(b.total_s - saved_s)}{capped}")
    return ({"overhead": saved_s} if saved_s > 0 else {}), basis


def _replay_saved_s(total_s: float, replay_s: float) -> float:
    """What a replay removes from T_wall: T_wall less the replay's own time per call,
    not T_wall scaled by the experiment's ratio. A replay issues one launch, so its time
    is the kernels' and stays put while a host-bound eager's moves with the host's speed
    (ResNet-50 at batch 1 on an H100: eager 4.93 ms in the diagnosis's timing, 3.49 ms in
    its replay experiment seconds later, the replay 913 us, the remedy 867 us). Over 41
    committed H100 rows the CUDA-graph remedy measured within 1.2x of the replay's time
    on 40, of the scaled one on 37 (benchmarks/replay_basis_check.py).
    Negative where the replay was slower."""
    return total_s - replay_s


def replay_host_left_s(ctx: Context) -> float | None:
    """The host's issue time a replay leaves per call: none of the issuing (the replay
    is one launch), only the wait for data; without a measured replay, also the host
    time outside PyTorch ops that `dispatch` assumes stays. None without a budget."""
    b, ceil = ctx.budget, ctx.ceilings
    if b is None or ceil is None:
        return None
    host = host_time(b, ctx.records, ceil)
    g = ctx.graph
    if g is not None and g.speedup and g.eager_s and g.replay_s:
        return host.loading_s
    return host.loading_s + host.outside_s


def _launch_ratio(ctx: Context) -> tuple[int, int] | None:
    """(eager kernels, the default compile's estimated launches: fusion_estimate.compiled_launches)
    on CUDA where the host's issue time was measured; None elsewhere."""
    b = ctx.budget
    if ctx.device != "cuda" or b is None or b.host_issue_s is None or not b.kernels:
        return None
    return compiled_launches(list(ctx.records), [k.op_index for k in b.kernels])


def fewer_launches(ctx: Context) -> Saving:
    """torch.compile's default mode on CUDA still issues every kernel from Python, but
    fewer of them: Inductor's fusion joins the pointwise and norm chains, dynamo drops the
    module code between ops. The host's issue time is taken to scale with the launches
    (`compiled_host_left_s`: each costing what an eager launch did, all of the eager
    host's time per kernel included), and the GPU's idle time between them with it. On
    the H200 GPT-2 at batch 1 was predicted 1.04x by fusion alone and measured 2.34x, and
    GPT-2 8x512 cast to bf16 and compiled 3.03x against 8.29x (session w): their host
    issued every eager kernel. The eager host's time per kernel is an upper bound on the
    compiled code's (on that H200 about 35 us against 26 us), so this under-credits."""
    counts = _launch_ratio(ctx)
    if counts is None:
        return {}, "no measured issue time (CPU, a trace): the launches are not credited"
    before, after = counts
    if before == 0 or after >= before:
        return {}, f"no fewer launches after fusion ({before} kernels -> ~{after})"
    b, ceil = ctx.budget, ctx.ceilings
    assert b is not None and ceil is not None and b.host_issue_s is not None
    loading_s = host_time(b, ctx.records, ceil).loading_s
    saved_s = max(0.0, b.overhead_s - loading_s) * (1.0 - after / before)
    left_s = compiled_host_left_s(ctx) or 0.0
    basis = (f"Inductor's fusion launches ~{after} kernels where eager launched {before}: "
             f"the host's issue time {fmt_s(b.host_issue_s)} scales with them to "
             f"{fmt_s(left_s)} (each launch costing what an eager one did, an upper "
             f"bound), and the GPU's idle time between launches with it: {fmt_s(saved_s)}")
    # A measured replay issued none of the launches; fewer launches cannot remove more
    # GPU-idle time than it did. On an H100 the GPT-2 training step's replay removed
    # 1.03x where this scaling claimed ~10 ms of 61 ms.
    g = ctx.graph
    if g is not None and g.speedup and g.eager_s and g.replay_s:
        replay_saved_s = max(0.0, _replay_saved_s(b.total_s, g.replay_s))
        if saved_s > replay_saved_s:
            saved_s = replay_saved_s
            basis += (f", capped at the {fmt_s(replay_saved_s)} the graph-replay "
                      f"experiment removed with every launch gone ({g.speedup:.2f}x)")
    return ({"overhead": saved_s} if saved_s > 0 else {}), basis


def compiled_call(ctx: Context) -> Saving:
    """torch.compile on CPU: the eager ops' dispatch goes (n_ops x the per-op cost, at
    most the overhead), and the compiled call's own host work comes: its guards and
    wrappers with the tensors it reads (the calibration's `compiled_call_s`, then
    `compiled_tensor_s` for each parameter and buffer storage beyond one input), and each
    extern call or fused kernel after the first at an eager op's cost (the generated code
    calls them one by one; `fusion_estimate.compiled_launches`). The result may be a loss:
    on this project's 2-core CPU `examples:mlp` at batch 1 was predicted 3.09x by the
    dispatch alone and measured 0.71x (60 -> 83 us). Without those calibrated figures
    (a cache written before them, a machine that could not compile) the dispatch alone,
    an upper bound, as before. A training step's wrappers cost more (autograd's): under
    this estimate."""
    ceil = ctx.ceilings
    if ctx.budget is None or ceil is None or ceil.compiled_call_s is None \
            or ceil.compiled_tensor_s is None:
        return dispatch(ctx, launch=False)
    b = ctx.budget
    host = host_time(b, ctx.records, ceil)
    records = list(ctx.records)
    working = [r.index for r in records if r.op_class != "view" and r.phase != DATA_LOADING]
    before, after = compiled_launches(records, list(working))
    tensors = len(ctx.param_storages) + 1  # and one input
    call_s = (ceil.compiled_call_s + (tensors - 1) * ceil.compiled_tensor_s
              + max(0, after - 1) * ceil.op_overhead_s)
    saved_s = host.dispatch_s - call_s
    basis = (f"the dispatch of {host.n_ops} eager ops goes ({fmt_s(host.dispatch_s)}); "
             f"the compiled call costs the host {fmt_s(call_s)}: "
             f"{fmt_s(ceil.compiled_call_s)} a call, {tensors - 1} parameter and buffer "
             f"tensor(s) x {fmt_s(ceil.compiled_tensor_s)}, ~{after} extern calls and "
             f"fused kernels where eager ran {before} ops x {fmt_s(ceil.op_overhead_s)} "
             "(calibrated)")
    if saved_s < 0:
        basis += f": {fmt_s(-saved_s)} more host time a call"
    return ({"overhead": saved_s} if saved_s != 0 else {}), basis


def compiled_host_left_s(ctx: Context) -> float | None:
    """The host's issue time the default compile leaves per call (`fewer_launches`): the
    measured wait for data, and the rest of the measured issue time scaled by the
    launches; None where nothing is measured or no launch goes."""
    counts = _launch_ratio(ctx)
    b, ceil = ctx.budget, ctx.ceilings
    if counts is None or b is None or ceil is None or b.host_issue_s is None:
        return None
    before, after = counts
    if before == 0 or after >= before:
        return None
    loading_s = min(b.host_issue_s, host_time(b, ctx.records, ceil).loading_s)
    return loading_s + (b.host_issue_s - loading_s) * after / before


def fusion(ctx: Context) -> Saving:
    """Inductor fuses pointwise/norm/softmax/reduction chains: an intermediate read only
    inside its kernel stays on chip (fusion_estimate.py: an estimate checked
    against Inductor's own byte count); the fusable ops' memory-bound time shrinks with
    their bytes."""
    b = ctx.budget
    assert b is not None
    saved_bytes, fusable_bytes = fusable_bytes_saved(ctx.records)
    # the memory-bound time of the ops the estimate fuses (is_fusable: the fusable
    # classes, and the loss backward and random ops Inductor draws into them), so the
    # bytes and the time saved are shares of the same ops
    fusable = {r.index for r in ctx.records if is_fusable(r)}
    fusable_mem_s = sum(c.time_s for c in b.per_call
                        if c.index in fusable and c.regime == "memory")
    if saved_bytes <= 0 or fusable_mem_s <= 0:
        return {}, "no fusable pointwise/norm chain with memory-bound time"
    saved_s = fusable_mem_s * saved_bytes / fusable_bytes
    return {"memory": saved_s}, (
        f"fusing pointwise/norm chains cuts their bytes {fmt_num(fusable_bytes, 'B')} -> "
        f"{fmt_num(fusable_bytes - saved_bytes, 'B')}: {fmt_s(saved_s)} of "
        f"{fmt_s(fusable_mem_s)} memory-bound time")


def matmul_gap(ctx: Context, classes: tuple[str, ...], what: str) -> Saving:
    """AUTOTUNE_GAP_SHARE of the time compute-bound ops of `classes` spend above their
    roofline floor (the budget's per-call rows)."""
    b = ctx.budget
    assert b is not None
    rows = [c for c in b.per_call if c.op_class in classes and c.regime == "compute"]
    gap_s = sum(max(0.0, c.time_s - c.floor_s) for c in rows)
    if gap_s <= 0:
        return {}, f"no compute-bound {what} time above its roofline"
    saved_s = AUTOTUNE_GAP_SHARE * gap_s
    return {"compute": saved_s}, (
        f"{len(rows)} compute-bound {what} call(s) spend {fmt_s(gap_s)} above their "
        f"roofline floor; autotuning credited with {AUTOTUNE_GAP_SHARE:.0%} of it")


def autograd(ctx: Context) -> Saving:
    """torch.inference_mode: no autograd node per recorded op (AUTOGRAD_COST_PER_OP x the
    per-op cost each), at most the overhead: the bookkeeping is host time, hidden when the
    device is busy."""
    b, ceil = ctx.budget, ctx.ceilings
    assert b is not None and ceil is not None
    n = sum(1 for r in ctx.records if r.autograd)
    if n == 0:
        return {}, "no op recorded by autograd (grad mode off or nothing requires grad)"
    cost_s = n * AUTOGRAD_COST_PER_OP * ceil.op_overhead_s
    saved_s = min(cost_s, b.overhead_s)
    return {"overhead": saved_s}, (
        f"{n} ops recorded by autograd x {fmt_s(ceil.op_overhead_s)} of bookkeeping each "
        f"= {fmt_s(cost_s)}" + (f", at most the {fmt_s(b.overhead_s)} of overhead"
                                if saved_s < cost_s else ""))


def folding_ops(records: Sequence[Any], param_storages: Iterable[int]) -> list[Any]:
    """The forward ops Inductor freezing folds: everything each reads is a parameter or
    buffer, or was written by an op that folds. Storages are runtime addresses, and the
    caching allocator hands a freed one out again: an op that does not fold makes what
    it writes non-constant again (without that, a folded weight copy's freed storage,
    reused for an activation, made every op after it look foldable: BERT-base on the
    H200 was predicted 537x for freezing)."""
    const = set(param_storages)
    out = []
    for r in records:
        if r.phase != FORWARD:
            continue
        folds = bool(r.reads) and all(p in const for p in r.reads)
        for ptr, _ in r.writes:
            if folds:
                const.add(ptr)
            else:
                const.discard(ptr)
        if folds:
            out.append(r)
    return out


def constant_folding(ctx: Context) -> Saving:
    """Inductor freezing turns parameters into constants and folds what depends on them
    alone (weight casts, transposes, layout copies) into the compiled graph: those ops'
    time goes (folding_ops); views cost nothing under compile already."""
    b = ctx.budget
    assert b is not None
    times = {c.index: c for c in b.per_call}
    saved: dict[str, float] = {}
    n = 0
    for r in folding_ops(ctx.records, ctx.param_storages):
        row = times.get(r.index)
        if r.op_class == "view" or row is None or row.regime == "overhead":
            continue
        saved[row.regime] = saved.get(row.regime, 0.0) + row.time_s
        n += 1
    if n == 0:
        return {}, "no op computes from parameters alone"
    return saved, (f"{n} op(s) computing from parameters alone (weight casts, "
                   f"transposes) fold into constants: {fmt_s(sum(saved.values()))}")


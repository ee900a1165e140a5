"""The live profiled run: one call of the workload under the counting dispatch mode *and* the
torch profiler, each op wrapped in a range `gobrrr#<index>`, so every CUDA kernel maps
exactly to the counted op (and module) that launched it.

Only device-side durations are read from this run. Its CPU timeline is slowed by the
profiler and by the Python dispatch mode, so nothing here is wall time: `T_wall` comes
from timing.py on an unprofiled run.

On CPU there are no kernels and ops run synchronously: each distinct op is replayed alone
and timed, minus the cost of an empty op (see `_cpu_timed`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from typing import Any

from gobrrr.counting import (
    MATMUL_CLASSES,
    RANGE_PREFIX,
    CountResult,
    count_marked,
    count_with_calls,
)
from gobrrr.errors import first_line
from gobrrr.phases import is_collective
from gobrrr.recorded import inductor_kind, is_inductor_kernel
from gobrrr.run import Kernel, ProfiledRun
from gobrrr.timing import measure
from gobrrr.workload import Workload

__all__ = ["profile_counted", "is_math_kernel", "is_compute_kernel", "split_kernel_time",
           "walk_events", "lead_in_calls", "device_starts", "kernels_with_starts", "graph_kernels",
           "WINDOW"]

# Kernel names of matrix engines (cuBLAS/cuBLASLt incl. Hopper's nvjet, GEMVs, CUTLASS,
# cuDNN convolutions, flash/memory-efficient attention, Triton matmuls). Any other kernel
# launched by a matmul-class op (layout transposes, split-K reductions, bias adds) moves
# bytes and does little math, and is classified apart.
_MATH_KERNEL = re.compile(
    r"gemm|gemv|xmma|cutlass|nvjet|cublas|wgmma|mma|conv|implicit|winograd|fft|flash|fmha|"
    r"attention|attn|matmul|dot_|sm\d\d_|ampere_|hopper_|volta_|turing_",
    re.IGNORECASE,
)


# Split-K reductions sum the partial products of a split GEMM: they move bytes and do one
# add per element, though cuBLASLt names them "cublasLt::splitKreduce_kernel" (seen on the
# H200 for fp32 addmm and mm, tests/data/traces/mlp_train_step.json.gz).
_REDUCTION_KERNEL = re.compile(r"split_?k_?reduce|reduce_?split_?k", re.IGNORECASE)


# Matrix-vector products (cuBLAS's gemvx, gemv2T, gemv2N...): a matmul's kernels, but
# every weight is read for one multiply-add per row of input, about 1 FLOP per byte in
# bf16 and less in fp32, far under any GPU's ridge point: memory-bound whatever their size.
_GEMV_KERNEL = re.compile(r"gemv", re.IGNORECASE)


def is_math_kernel(name: str) -> bool:
    """A matmul's, convolution's or attention's own kernel (not its transposes or split-K
    reductions): which kernels of a matmul op carry its math. An Inductor kernel says its
    kind after `triton_`: a template (`tem`: a GEMM, a convolution) is math; a pointwise
    or reduction kernel is named after the ops it fused, so a bias add after an extern
    convolution (`triton_poi_fused_convolution_relu_3`) or the split of a fused qkv
    projection (`triton_poi_fused__scaled_dot_product_efficient_attention_0`) is not."""
    if is_inductor_kernel(name):
        return inductor_kind(name) == "tem"
    return bool(_MATH_KERNEL.search(name)) and not _REDUCTION_KERNEL.search(name)


def is_compute_kernel(name: str) -> bool:
    """A kernel that, with no op or shape to count it by (a CUDA graph's replay in a
    trace), is read as compute-bound by its name: a math kernel that is not a GEMV."""
    return is_math_kernel(name) and not _GEMV_KERNEL.search(name)


def _range_index(name: str) -> int | None:
    if name.startswith(RANGE_PREFIX):
        try:
            return int(name[len(RANGE_PREFIX):])
        except ValueError:
            return None
    return None


def walk_events(event: Any) -> Iterable[Any]:
    """A profiler event and every event under it (its CPU children, depth first)."""
    yield event
    for child in event.cpu_children:
        yield from walk_events(child)


WINDOW = "gobrrr:counted-call"


def lead_in_calls(wall_s: float | None) -> int:
    """Unmarked calls before the profiled one: ~0.1 s of them, 3 to 50 (see
    profile_counted for why the profiled call must not run cold)."""
    if not wall_s or wall_s <= 0:
        return 3
    return int(min(50, max(3, math.ceil(0.1 / wall_s))))


def profile_counted(w: Workload, wall_s: float | None = None) -> ProfiledRun:
    """Count and profile one call of a (warmed-up) workload; `wall_s` (the timer's
    median) sizes the lead-in that brings the GPU to the state the timer saw."""
    if w.device != "cuda":
        return _cpu_timed(w)
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    # Lead-in: unmarked calls back to back for ~0.1 s, then the marked call with no sync
    # between, so its kernels run in the sustained state the wall timing measured. Two
    # reasons: the first kernels of a fresh CUPTI session run slower (seen: a bf16 matmul
    # at 2x its time), and a GPU coming out of idle runs faster clocks for a while than
    # under sustained load (seen: a large matmul 26% faster than in the timed loop).
    lead_in = lead_in_calls(wall_s)
    holder: dict[str, CountResult] = {}
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's notes about its own cycles
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(lead_in):
                w.run("the profiled run")
            with record_function(WINDOW):
                holder["c"] = count_marked(w.run, "the profiled run", mark_ranges=True)
                torch.cuda.synchronize()
    counts = holder["c"]
    run = ProfiledRun(counts=counts, device=w.device, op_time_s={})
    events = prof.events()
    window = next((e for e in events if e.name == WINDOW), None)
    starts = device_starts(events)
    attributed: set[int] = set()
    for e in events:
        idx = _range_index(e.name)
        if idx is None:
            continue
        for sub in walk_events(e):
            for k, start in kernels_with_starts(sub, starts):
                run.kernels.append(Kernel(k.name, k.duration * 1e-6, idx, start))
                attributed.add(id(k))
    # Kernels launched inside the window but outside any counted op (e.g. the autograd
    # engine's gradient accumulation, or work dispatched below the Python key).
    for e in events:
        if (window is None or _range_index(e.name) is not None
                or e.device_type != torch.autograd.DeviceType.CPU
                or not (window.time_range.start <= e.time_range.start
                        <= window.time_range.end)):
            continue
        for k, start in kernels_with_starts(e, starts):
            if id(k) not in attributed and not _inside_range(e):
                run.kernels.append(Kernel(k.name, k.duration * 1e-6, None, start))
                attributed.add(id(k))
        if (str(e.name).startswith("cudaGraphLaunch") and not getattr(e, "kernels", None)
                and not _inside_range(e)):
            run.kernels += graph_kernels(e, events)
    run.tally_kernels()
    return run


def graph_kernels(launch: Any, events: Iterable[Any]) -> list[Kernel]:
    """The kernels a CUDA graph launch ran: the profiler lists none on the launch event
    (seen on torch 2.11: `cudaGraphLaunch` with no kernels, its replayed kernels as
    device events carrying the launch's correlation id), so they are found by that id."""
    corr = getattr(launch, "id", None)
    out = []
    for d in events:
        dt = getattr(d, "device_type", None)
        if not getattr(dt, "name", str(dt)).upper().endswith("CUDA") or corr is None:
            continue
        if corr in (getattr(d, "id", None), getattr(d, "linked_correlation_id", None)):
            out.append(Kernel(d.name, d.time_range.elapsed_us() * 1e-6, None,
                              float(d.time_range.start)))
    return out


def device_starts(events: Iterable[Any]) -> dict[int, list[tuple[str, float]]]:
    """(name, start time in us on the profiler clock) of the CUDA kernels, by correlation
    id: a kernel's event carries the correlation id of its launch (the runtime call,
    e.g. `cudaLaunchKernel`), as `id` (seen on torch 2.11) or as `linked_correlation_id`
    (torch 2.13), so it is filed under both."""
    out: dict[int, list[tuple[str, float]]] = {}
    for e in events:
        dt = getattr(e, "device_type", None)
        if not getattr(dt, "name", str(dt)).upper().endswith("CUDA"):
            continue
        ids = {getattr(e, "id", 0), getattr(e, "linked_correlation_id", 0)} - {0, None}
        for corr in ids:
            out.setdefault(corr, []).append((e.name, float(e.time_range.start)))
    return out


def kernels_with_starts(event: Any, starts: dict[int, list[tuple[str, float]]]
                 ) -> list[tuple[Any, float | None]]:
    """The kernels an event lists, each with its device start time where a launch inside
    the event (the event itself or a runtime call below it, `cu*`) links to a kernel of
    the same name; earliest first. None where nothing links: never a guess."""
    launches = [x for x in walk_events(event) if str(x.name).startswith("cu")]
    found = sorted((p for x in launches for p in starts.get(getattr(x, "id", -1), [])),
                   key=lambda p: p[1])
    out: list[tuple[Any, float | None]] = []
    for k in getattr(event, "kernels", ()):
        i = next((j for j, (name, _t) in enumerate(found) if name == k.name), None)
        out.append((k, None if i is None else found.pop(i)[1]))
    return out


def _signature(func: Any, args: tuple, kwargs: dict) -> tuple:
    """Ops with the same function, tensor shapes/strides/dtypes and other arguments cost
    the same: time one of them."""
    import torch
    from torch.utils._pytree import tree_flatten

    def key(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return ("T", tuple(x.shape), tuple(x.stride()), x.dtype)
        return repr(x)[:100]

    return (str(func), tuple(key(x) for x in tree_flatten((args, kwargs))[0]))


def _cpu_timed(w: Workload, budget_per_op_s: float = 0.02) -> ProfiledRun:
    """CPU: ops run synchronously, so each distinct op of the counted run is replayed on
    its own (same function, same input tensors), warm, and timed with the honest timer.
    Timing inside the dispatch mode instead would charge each op for the cold caches the
    mode's own Python work leaves behind. The cost of replaying an empty op (a 1-element
    add_, called the same way) is subtracted: that is dispatch, not execution.
    NB: in-place ops are replayed on the same tensors (values drift; cost does not)."""
    import torch


    counts, calls = count_with_calls(w.run, "the counted run")
    s = torch.randn(1)
    add_ = torch.ops.aten.add_.Tensor
    empty_s = measure(lambda: add_(s, 1.0), budget_s=0.1).median_s
    run = ProfiledRun(counts=counts, device=w.device, op_time_s={}, empty_range_cost_s=empty_s)
    cache: dict[tuple, float] = {}
    for rec, (func, args, kwargs) in zip(counts.records, calls, strict=True):
        if rec.op_class == "view" or is_collective(rec.op):
            # A collective replayed alone on one rank would block until its peers join
            # (never): its time is communication, measured in the profiled steps of a
            # distributed run (gobrrr.dist), never replayed.
            run.op_time_s[rec.index] = 0.0
            continue
        sig = _signature(func, args, kwargs)
        if sig not in cache and _freed_input(args, kwargs):
            # FSDP2 frees its all-gather buffers and unsharded parameters after use
            # (storage resized to 0): replaying an op on them read freed memory
            # (SIGSEGV in fsdp::split_with_sizes_copy). Replayed on fresh tensors of the
            # same shape, strides and dtype instead (the cost does not depend on values).
            args, kwargs = _refill_freed((args, kwargs))
        if sig not in cache:
            try:
                try:
                    t = _replay(measure, func, args, kwargs, budget_per_op_s)
                except RuntimeError:
                    # Autograd's view checks can refuse an in-place op on a view made
                    # under no_grad (DDP's gradient buckets): the op's execution is the
                    # same without grad mode, only the refused graph recording differs.
                    with torch.no_grad():
                        t = _replay(measure, func, args, kwargs, budget_per_op_s)
                cache[sig] = max(0.0, t.median_s - empty_s)
            except Exception as exc:  # an op that cannot run twice (e.g. consumed state)
                cache[sig] = 0.0  # unmeasured, not free: the budget's note says so and why
                run.unreplayable.append(rec.op)
                run.replay_errors.setdefault(rec.op, first_line(exc))
        run.op_time_s[rec.index] = cache[sig]
    del calls
    run.busy_s = sum(run.op_time_s.values())
    return run


def _freed_input(args: tuple, kwargs: dict) -> bool:
    """Whether a tensor input with elements now has no storage (freed by resize_(0))."""
    import torch
    from torch.utils._pytree import tree_leaves

    for t in tree_leaves((args, kwargs)):
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        try:
            if t.untyped_storage().nbytes() == 0:
                return True
        except (RuntimeError, NotImplementedError):  # a subclass without one storage
            continue
    return False


def _refill_freed(tree: Any) -> Any:
    """`tree` with each freed tensor (elements, no storage) replaced by a fresh one of
    the same shape, strides, dtype and device, filled with random values."""
    import torch
    from torch.utils._pytree import tree_map

    def fresh(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            return t
        try:
            if t.untyped_storage().nbytes() != 0:
                return t
        except (RuntimeError, NotImplementedError):
            return t
        new = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
        with torch.no_grad():
            return new.uniform_() if new.is_floating_point() else new.zero_()

    return tree_map(fresh, tree)


def _replay(measure: Any, func: Any, args: tuple, kwargs: dict, budget_s: float) -> Any:
    return measure(functools.partial(func, *args, **kwargs), budget_s=budget_s,
                   warmup_s=0.0, min_samples=3, max_samples=20, min_sample_s=2e-4)


def _inside_range(event: Any) -> bool:
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        if _range_index(parent.name) is not None:
            return True
        parent = getattr(parent, "cpu_parent", None)
    return False


def split_kernel_time(run: ProfiledRun, index: int, op_class: str) -> tuple[float, float]:
    """(math kernel time, auxiliary kernel time) of one op: for a matmul-class op the
    non-GEMM kernels (transposes, reductions) are auxiliary; for other ops all is main."""
    if run.device != "cuda" or op_class not in MATMUL_CLASSES:
        return run.op_time_s.get(index, 0.0), 0.0
    main = aux = 0.0
    for k in run.kernels_of(index):
        if is_math_kernel(k.name):
            main += k.duration_s
        else:
            aux += k.duration_s
    if main == 0.0:  # unrecognised kernel names: keep the op's time whole
        return aux, 0.0
    return main, aux

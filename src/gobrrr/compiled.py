"""Workloads under `torch.compile`: found, warmed up apart, and profiled as they run.

- Detection: the callable, or anything it reaches (`state.walk`), is a compiled module
  (`OptimizedModule`) or a compiled function (`_torchdynamo_orig_callable`).
- Warm-up: the first call compiles (and, in mode="reduce-overhead", captures CUDA
  graphs); it is timed apart and reported as compile time, never inside T_wall. Dynamo's
  counters are read before and after the warm-up and after the timing: frames compiled
  during the timing are recompiles (overhead the user can remove), `graph_break` entries
  are graph breaks with their reasons.
- Counting: the eager twin, by counting.py under `torch.compiler.set_stance("force_eager")`
  (no compile, no recompile of the user's code; the twin's FLOPs and bytes).
- Profiled run: *not* under the counting mode, which would run the compiled code eagerly.
  One call under the torch profiler with `record_shapes`; every kernel-launching op of
  the compiled code (on CUDA also the backward the autograd engine runs on its own
  thread inside the call) becomes a record: extern ATen ops (mm, addmm, convolution, attention)
  with FLOPs from their recorded shapes, Triton kernels with bytes from their launch
  arguments (inputs and outputs, each at most the elements the kernel's recorded sizes
  say it computes, as Inductor's own byte count bounds them). On CPU, Inductor's
  C++ kernels are not visible to the profiler: their time is the graph call's time minus
  the ATen ops inside it, and their FLOPs and bytes are estimated from the eager twin
  (its non-matmul FLOPs; its fusable bytes after Inductor's fusion as
  fusion_estimate.py estimates it) and said to be.
  Kernels replayed from a CUDA graph (mode="reduce-overhead") carry no shapes either:
  the GEMM-like ones get the eager twin's matmul work, the others its other work.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gobrrr.counting import MATMUL_CLASSES, CountResult, OpRecord, dtype_name
from gobrrr.fusion_estimate import generated_bytes
from gobrrr.phases import COMPILED
from gobrrr.profile import (
    WINDOW,
    device_starts,
    is_math_kernel,
    kernels_with_starts,
    lead_in_calls,
    walk_events,
)
from gobrrr.recorded import (
    COMPILED_GRAPH_RANGES,
    args_bytes,
    is_inductor_kernel,
    kernel_args_bytes,
    kernel_elements,
    matmul_flops,
    op_class_by_name,
)
from gobrrr.recorded import PROFILER_DTYPES as _DTYPES
from gobrrr.run import Kernel, ProfiledRun
from gobrrr.settings import tf32_enabled
from gobrrr.state import preserved_state, walk
from gobrrr.timing import device_sync
from gobrrr.workload import from_callable

if TYPE_CHECKING:
    from gobrrr.counting import CountResult, OpRecord
    from gobrrr.run import ProfiledRun
    from gobrrr.workload import Workload

__all__ = ["CompileInfo", "DynamoCounts", "is_compiled", "dynamo_counts",
           "graph_breaks_between", "warm_up", "read_compile", "profile_compiled",
           "graph_replay_note"]


def _compiled_object(obj: Any) -> bool:
    import torch

    return isinstance(obj, torch._dynamo.eval_frame.OptimizedModule) or \
        hasattr(obj, "_torchdynamo_orig_callable")


def is_compiled(w: Workload) -> bool:
    """Whether the workload runs code under torch.compile (itself, or a compiled module
    or function it reaches)."""
    if _compiled_object(w.fn) or _compiled_object(getattr(w.fn, "__self__", None)):
        return True

    r = walk(w.fn, w.args, w.kwargs)
    return any(_compiled_object(o) for o in [*r.modules, *r.objects, *r.functions])


@dataclass(frozen=True)
class DynamoCounts:
    """Dynamo's counters at one moment (they only grow while gobrrr runs)."""

    frames: int
    graphs: int
    graph_breaks: dict[str, int]
    recompile_limit_hit: bool


def dynamo_counts() -> DynamoCounts:
    from torch._dynamo.utils import counters

    unimplemented: dict[str, int] = dict(counters.get("unimplemented", {}))
    return DynamoCounts(int(counters["frames"]["total"]),
                        int(counters["stats"]["unique_graphs"]),
                        dict(counters.get("graph_break", {})),
                        any("recompile" in k.lower() or "cache_size_limit" in k.lower()
                            for k in unimplemented))


@dataclass(frozen=True)
class CompileInfo:
    """What compiling cost and what dynamo reported while gobrrr ran the workload."""

    first_call_s: float  # the first call gobrrr made: compile + capture when fresh
    steady_call_s: float  # the call after it
    compile_s: float  # first - steady: 0 when the user's code was already compiled
    frames_compiled: int  # during the warm-up
    graphs: int
    graph_breaks: int
    break_reasons: list[str] = field(default_factory=list)
    recompiles_during_timing: int = 0
    timed_calls: int = 0
    recompile_limit_hit: bool = False

    def findings(self) -> list[str]:
        """Overhead the user can remove, one line each."""
        out = []
        if self.recompile_limit_hit:
            out.append("dynamo hit its recompile limit: the frame now runs eagerly, "
                       "uncompiled")
        if self.recompiles_during_timing:
            every = self.recompiles_during_timing >= 0.9 * self.timed_calls
            out.append(f"{'recompiles on every call' if every else 'recompiles'}: "
                       f"{self.recompiles_during_timing} in {self.timed_calls} timed calls "
                       "(guards fail: a changing Python value, shape or dtype)")
        if self.graph_breaks:
            reasons = "; ".join(self.break_reasons[:3])
            out.append(f"{self.graph_breaks} graph break(s): {reasons}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"findings": self.findings()}


def warm_up(w: Workload) -> tuple[float, float, DynamoCounts, DynamoCounts]:
    """Two timed calls before any measurement: (first call s, second call s, counters
    before, counters after)."""

    sync = device_sync(w.device)
    before = dynamo_counts()
    times = []
    for _ in range(2):
        sync()
        t0 = time.perf_counter()
        w.run("the first call of a compiled workload (compile)")
        sync()
        times.append(time.perf_counter() - t0)
    return times[0], times[1], before, dynamo_counts()


def graph_breaks_between(before: DynamoCounts, after: DynamoCounts) -> tuple[int, list[str]]:
    """(graph breaks, their reasons most frequent first, one line each) dynamo counted
    between two moments: what a compile of the user's code broke on, read from the
    compile itself (no separate torch._dynamo.explain run, which no deadline bounds)."""
    breaks = {k: v - before.graph_breaks.get(k, 0) for k, v in after.graph_breaks.items()
              if v > before.graph_breaks.get(k, 0)}
    reasons = sorted(breaks, key=lambda k: -breaks[k])
    return sum(breaks.values()), [r.splitlines()[0][:160] for r in reasons]


def read_compile(first_s: float, steady_s: float, before: DynamoCounts,
                 warm: DynamoCounts, after_timing: DynamoCounts,
                 timed_calls: int) -> CompileInfo:
    n_breaks, reasons = graph_breaks_between(before, after_timing)
    return CompileInfo(
        first_call_s=first_s, steady_call_s=steady_s,
        compile_s=max(0.0, first_s - steady_s),
        frames_compiled=warm.frames - before.frames,
        graphs=after_timing.graphs - before.graphs,
        graph_breaks=n_breaks, break_reasons=reasons,
        recompiles_during_timing=after_timing.frames - warm.frames,
        timed_calls=timed_calls,
        recompile_limit_hit=after_timing.recompile_limit_hit and not before.recompile_limit_hit)


# ---------------------------------------------------------------- the profiled run

def _tensor_args(e: Any, dtypes: list[str]) -> list[tuple[list[int], str]]:
    """(shape, dtype) of the tensor arguments an op or a kernel launch recorded."""

    shapes = list(getattr(e, "input_shapes", None) or [])
    return [(s, d) for s, d in zip(shapes, dtypes, strict=False)
            if d in _DTYPES and isinstance(s, list) and len(s) > 0]


def _dtype_lookup(prof: Any) -> Any:
    """The recorded argument dtypes of a profiler event: `FunctionEvent.input_dtypes`
    where torch has it (2.13), else from the raw Kineto events (torch 2.11 keeps them
    there only), matched by name and start time."""
    by_key: dict[tuple[str, float], list[str]] = {}
    try:
        kr = prof.profiler.kineto_results
        t0 = kr.trace_start_ns()
        for ke in kr.events():
            by_key[(ke.name(), round((ke.start_ns() - t0) / 1000, 3))] = list(ke.dtypes())
    except (AttributeError, RuntimeError):  # an older or newer profiler API
        pass

    def lookup(e: Any) -> list[str]:
        got = getattr(e, "input_dtypes", None)
        if got:
            return list(got)
        return by_key.get((str(e.name), round(float(e.time_range.start), 3)), [])

    return lookup


def _conv_output(e: Any, args: list[tuple[list[int], str]]) -> list[int] | None:
    """The output shape of a recorded convolution: batch, output channels and the spatial
    size from the recorded stride, padding and dilation; None when not recorded."""
    concrete = list(getattr(e, "concrete_inputs", None) or [])
    if len(args) < 2 or len(concrete) < 9:
        return None
    x, w = args[0][0], args[1][0]
    stride, padding, dilation = concrete[3], concrete[4], concrete[5]
    if not all(isinstance(v, list) for v in (stride, padding, dilation)):
        return None
    spatial = [(x[2 + i] + 2 * padding[i] - dilation[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
               for i in range(len(w) - 2)]
    return [x[0], w[0], *spatial]


def _conv_flops(e: Any, args: list[tuple[list[int], str]], out: list[int] | None
                ) -> int | None:
    """2 x output elements x (C_in / groups) x kernel size."""
    if out is None:
        return None
    concrete = list(getattr(e, "concrete_inputs", None) or [])
    groups = concrete[8] if isinstance(concrete[8], int) else 1
    x, w = args[0][0], args[1][0]
    return 2 * math.prod(out) * (x[1] // groups) * math.prod(w[2:])


def _record(index: int, e: Any, dtypes: list[str], module: str, device: str) -> OpRecord:

    args = _tensor_args(e, dtypes)
    name = str(e.name)
    op_class = op_class_by_name(name)
    if is_inductor_kernel(name):  # each argument at most the elements it computes
        concrete = list(getattr(e, "concrete_inputs", None) or [])
        nbytes = kernel_args_bytes(args, kernel_elements(dtypes, concrete))
    else:
        nbytes = args_bytes(args)
    if op_class == "conv":
        out = _conv_output(e, args)
        flops = _conv_flops(e, args, out)
        if out is not None:
            # Inductor calls an extern convolution as a function (no out= argument), so
            # the profiler recorded its inputs only: its output is written too, as the
            # eager count has it (missing, a 1x1 convolution widening 64 -> 256 channels
            # read as compute-bound: compiled ResNet-50 on the H200, against the trace)
            nbytes += math.prod(out) * _DTYPES[args[0][1]].itemsize
    else:
        flops = matmul_flops(name, args)

    dtype = dtype_name(_DTYPES[args[0][1]]) if args else "none"
    unit = None
    if op_class in MATMUL_CLASSES:
        unit = dtype
        if dtype == "fp32" and device == "cuda":

            unit = "tf32" if tf32_enabled("conv" if op_class == "conv" else "matmul") else "fp32"
    return OpRecord(index=index, op=name, module=module, phase=COMPILED, op_class=op_class,
                    dtype=dtype, flops=flops or 0, bytes=nbytes,
                    tensor_core_unit=unit, has_formula=flops is not None)


def _is_op(e: Any) -> bool:
    name = str(e.name)
    return name.startswith(("aten::", "triton_", "cpp_fused"))


def _owners(window: Any) -> list[Any]:
    """The outermost ops (ATen, Triton, Inductor C++) below the window: each is one
    record; the ATen calls an op makes inside itself belong to it."""
    out = []

    def visit(e: Any) -> None:
        for c in e.cpu_children:
            if _is_op(c):
                out.append(c)
            else:
                visit(c)

    visit(window)
    return out


# The range the autograd engine writes around each backward function it runs
_AUTOGRAD_ENGINE = "autograd::engine::evaluate_function"


def _roots_elsewhere(events: list[Any], window: Any) -> list[Any]:
    """The autograd engine's outermost events on other threads that start inside the
    window (another thread's own work, a DataLoader's pinning say, is not the call's). On CUDA
    the autograd engine runs the backward on a thread of its own, so a compiled graph's
    backward (`CompiledFunctionBackward` and the `## Call CompiledFxGraph` range inside
    it) is not among the window's children (seen on torch 2.11, H100: a compiled GPT-2
    training step's backward GEMMs were missing, their time read as overhead)."""
    lo, hi = window.time_range.start, window.time_range.end
    return [e for e in events
            if e.cpu_parent is None and e.thread != window.thread
            and str(e.name).startswith(_AUTOGRAD_ENGINE)
            and getattr(e.device_type, "name", "") == "CPU"
            and lo <= e.time_range.start <= hi]


def _graph_module(e: Any) -> str:
    """Which part of the run an op belongs to: a compiled graph or eager code between
    graphs (a graph break)."""
    p = e.cpu_parent
    while p is not None:
        if str(p.name).startswith(COMPILED_GRAPH_RANGES):
            return "compiled graph"
        p = p.cpu_parent
    return "eager (outside compiled graphs)"


def profile_compiled(w: Workload, wall_s: float, eager: CountResult) -> ProfiledRun:
    """One profiled call of a compiled workload (see the module docstring)."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function


    cuda = w.device == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # Lead-in calls as in trace.profile_counted: the marked call runs in the sustained
    # state the timer measured.
    lead_in = lead_in_calls(wall_s)
    if cuda:
        torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=acts, record_shapes=True) as prof:
            for _ in range(lead_in):
                w.run("the profiled run")
            with record_function(WINDOW):
                w.run("the profiled run")
                if cuda:
                    torch.cuda.synchronize()
    events = prof.events()
    window = next(e for e in events if e.name == WINDOW)
    # CPU autograd runs the backward on the calling thread: only CUDA has another.
    scopes = [window] + (_roots_elsewhere(list(events), window) if cuda else [])
    owners = [o for sc in scopes for o in ([sc] if _is_op(sc) else _owners(sc))]
    dtypes = _dtype_lookup(prof)
    records = [_record(i, e, dtypes(e), _graph_module(e), w.device)
               for i, e in enumerate(owners)]
    run = ProfiledRun(counts=CountResult(records), device=w.device, op_time_s={})
    if cuda:
        starts = device_starts(events)
        owned: set[int] = set()
        for i, e in enumerate(owners):
            for sub in walk_events(e):
                owned.add(id(sub))
                for k, start in kernels_with_starts(sub, starts):
                    run.kernels.append(Kernel(k.name, k.duration * 1e-6, i, start))
        # Kernels no op launched: a CUDA graph's replay (mode="reduce-overhead") launches
        # them all at once, with no shapes recorded. They get the eager twin's work.
        replayed = [Kernel(k.name, k.duration * 1e-6, None, start)
                    for sc in scopes for sub in walk_events(sc) if id(sub) not in owned
                    for k, start in kernels_with_starts(sub, starts)]
        run.kernels += _replayed_kernels(run, replayed, eager)
        run.tally_kernels()
    else:
        for i, e in enumerate(owners):
            run.op_time_s[i] = e.cpu_time_total * 1e-6
        _add_cpp_kernels(run, window, eager)
        run.busy_s = sum(run.op_time_s.values())
    return run


def _add_cpp_kernels(run: ProfiledRun, window: Any, eager: CountResult) -> None:
    """CPU: Inductor's generated C++ kernels run inside each graph call without profiler
    events. Their time: the graph calls' time minus the ATen ops inside them. Their FLOPs
    and bytes (approximate): the eager twin's non-matmul FLOPs, and its fusable ops' bytes
    after fusion (fusion_estimate.generated_bytes)."""

    calls = [e for e in walk_events(window) if str(e.name).startswith("## Call CompiledFxGraph")]
    if not calls:
        return
    inside = sum(c.cpu_time_total for call in calls for c in call.cpu_children if _is_op(c))
    rest_s = max(0.0, sum(c.cpu_time_total for c in calls) - inside) * 1e-6
    other = [r for r in eager.records if r.op_class not in MATMUL_CLASSES]
    rec = OpRecord(index=len(run.counts.records), op="inductor::cpp_kernels",
                   module="compiled graph", phase=COMPILED, op_class="pointwise",
                   dtype="fp32", flops=sum(r.flops for r in other),
                   bytes=generated_bytes(eager.records),
                   tensor_core_unit=None, has_formula=False)
    run.counts.records.append(rec)
    run.op_time_s[rec.index] = rest_s


def _replayed_kernels(run: ProfiledRun, kernels: list[Any], eager: CountResult) -> list[Any]:
    """Kernels replayed from a CUDA graph, attributed to two records that carry the eager
    twin's work (approximate, and named so): its matmul-class ops (FLOPs, bytes, unit) for
    the GEMM/conv/attention kernels, and its other ops for the rest, with bytes after
    fusion (fusion_estimate.generated_bytes: what Inductor's kernels move)."""

    if not kernels:
        return []
    mm = [r for r in eager.records if r.op_class in MATMUL_CLASSES]
    rest = [r for r in eager.records if r.op_class not in MATMUL_CLASSES]
    units = sorted({r.tensor_core_unit for r in mm if r.tensor_core_unit})
    groups = {
        "graph replay: matmul kernels (eager twin's work)": (
            "matmul", sum(r.flops for r in mm), sum(r.bytes for r in mm),
            units[0] if units else None, [k for k in kernels if is_math_kernel(k.name)]),
        "graph replay: other kernels (eager twin's work, fused)": (
            "pointwise", sum(r.flops for r in rest),
            generated_bytes(eager.records),
            None, [k for k in kernels if not is_math_kernel(k.name)]),
    }
    out = []
    for name, (op_class, flops, nbytes, unit, ks) in groups.items():
        if not ks:
            continue
        rec = OpRecord(index=len(run.counts.records), op=name, module="CUDA graph",
                       phase=COMPILED, op_class=op_class, dtype=unit or "fp32",
                       flops=flops, bytes=nbytes, tensor_core_unit=unit, has_formula=False)
        run.counts.records.append(rec)
        out += [Kernel(k.name, k.duration_s, rec.index, k.start_us) for k in ks]
    return out


def graph_replay_note(run: ProfiledRun, w: Workload, count: Any) -> str:
    """A workload whose call ran kernels but no op (it replays a CUDA graph): its kernel
    time is measured, so overhead is; FLOPs and bytes come from `w.eager` when given
    (its counted ops attributed to the replayed kernels, as for reduce-overhead), else
    the kernels stay unattributed and the note says what is missing."""
    unowned = [k for k in run.kernels if k.record_index is None]
    if w.eager is None:
        return ("the workload ran kernels but no PyTorch op (a CUDA graph replay?): kernel "
                "time and overhead are measured; FLOPs and bytes need the eager callable: "
                "gobrrr.diagnose(fn, *args, eager=eager_fn)")

    with preserved_state(from_callable(w.eager, w.args, w.kwargs)):  # counted, not kept
        eager = count(w.eager, *w.args, **w.kwargs)
    run.kernels = [k for k in run.kernels if k.record_index is not None]
    run.kernels += _replayed_kernels(run, unowned, eager)
    run.tally_kernels()
    return ("the workload replays a CUDA graph: its kernels carry the FLOPs and bytes of "
            "the eager callable given as `eager=` (approximate: matched by kernel kind)")


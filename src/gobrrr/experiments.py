"""The essay's experiments, automated, to establish cause:

- batch scaling: T(2B) / T(B) (and 4B when cheap), read against how FLOPs and bytes
  scale, counted at each size (the essay's caveat: for [B,D] x [D,D] with B << D,
  doubling B doubles FLOPs but barely changes bytes, so sub-linear time can mean low
  intensity, not overhead);
- CUDA-graph replay vs eager: the same kernels with the CPU out of the way.

Each experiment also states what the budget predicts for it, and whether they agree.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gobrrr.budget import Budget
from gobrrr.counting import count
from gobrrr.errors import UserError, WorkloadError
from gobrrr.timing import Timing
from gobrrr.workload import Workload

__all__ = ["BatchPoint", "BatchScaling", "GraphReplay", "batch_times", "batch_counts",
           "graph_replay", "read_graph", "capture_cuda_graph",
           "AGREE_TOLERANCE"]

# Experiment and budget agree when the measured ratio is within this relative distance of
# the predicted one: both sides carry noise of a few % and the budget's split is itself an
# estimate, so 25% separates "consistent" from "a different story".
AGREE_TOLERANCE = 0.25
Progress = Callable[[str], None]


@dataclass
class BatchPoint:
    batch_size: int | None
    factor: int
    time_s: float | None
    flops: int | None
    bytes: int | None
    error: str | None = None


@dataclass
class BatchScaling:
    points: list[BatchPoint] = field(default_factory=list)
    time_ratio: float | None = None  # T(2B)/T(B)
    flops_ratio: float | None = None
    bytes_ratio: float | None = None
    predicted_time_ratio: float | None = None  # from the budget
    agrees: bool | None = None
    reading: str = ""
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GraphReplay:
    possible: bool
    reason: str | None = None
    eager_s: float | None = None
    replay_s: float | None = None
    speedup: float | None = None
    predicted_speedup: float | None = None  # T_wall / busy time
    agrees: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _agree(measured: float, predicted: float) -> bool:
    return abs(measured - predicted) <= AGREE_TOLERANCE * predicted


def _free_device_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


# Rounds of interleaved timing (B, kB, B, kB, ...): the ratio T(kB)/T(B) is read from
# pairs taken side by side, so slow drift of the machine (clocks, other processes) cancels.
BATCH_ROUNDS = 3


def batch_times(w: Workload, base: Timing, timer: Callable[[Workload], Timing],
                progress: Progress) -> BatchScaling:
    """Time the workload at 2x (and 4x when 2x took under 50 ms per call) its batch,
    interleaved with the base batch; each point's time is scaled from the median of its
    per-round ratios to the base's median time.

    Run before any profiling: a profiler can leave tracing hooks that slow later kernel
    launches, which would bias an overhead-bound workload's times."""
    out = BatchScaling(points=[BatchPoint(w.batch_size, 1, base.median_s, None, None)])
    base_times = [base.median_s]
    for factor in (2, 4):
        last = out.points[-1]
        if factor == 4 and (last.time_s is None or last.time_s > 0.05):
            break
        progress(f"experiment: batch scaling, {factor}x batch")
        try:
            big = w.scaled(factor)
        except UserError as exc:
            out.skipped = str(exc)
            return out
        except WorkloadError as exc:
            out.points.append(BatchPoint(None, factor, None, None, None, str(exc.original)))
            break
        try:
            ratios = []
            for i in range(BATCH_ROUNDS):
                t_base = base.median_s if (i == 0 and factor == 2) else timer(w).median_s
                if not (i == 0 and factor == 2):
                    base_times.append(t_base)
                ratios.append(timer(big).median_s / t_base)
            base_s = statistics.median(base_times)
            out.points[0].time_s = base_s
            out.points.append(BatchPoint(big.batch_size, factor,
                                         base_s * statistics.median(ratios), None, None))
        except (WorkloadError, RuntimeError) as exc:
            # Out of memory (torch.OutOfMemoryError is a RuntimeError) or the workload
            # refusing the bigger batch: record it, release the memory, use what ran.
            original = exc.original if isinstance(exc, WorkloadError) else exc
            out.points.append(BatchPoint(big.batch_size, factor, None, None, None,
                                         f"{type(original).__name__}: {original}"))
            break
        finally:
            del big
            _free_device_memory(w.device)
    return out


def batch_counts(w: Workload, out: BatchScaling, base_flops: int, base_bytes: int,
                 budget: Budget) -> BatchScaling:
    """Count FLOPs and bytes at each batch that ran, then read the experiment against
    the budget."""
    out.points[0].flops, out.points[0].bytes = base_flops, base_bytes
    for p in out.points[1:]:
        if p.time_s is None:
            continue
        big = w.scaled(p.factor)
        try:
            counts = count(big.run, f"counting at {p.factor}x batch")
            p.flops, p.bytes = counts.total_flops, counts.total_bytes
        finally:
            del big
            _free_device_memory(w.device)
    _read_batch(out, budget)
    return out


def _read_batch(out: BatchScaling, budget: Budget) -> None:
    base = out.points[0]
    two = next((p for p in out.points if p.factor == 2 and p.time_s), None)
    if two is None or not base.time_s or not base.flops or not base.bytes:
        failed = next((p for p in out.points if p.error), None)
        out.reading = (f"the 2x batch did not run: {failed.error}" if failed
                       else "no 2x measurement")
        return
    assert two.time_s is not None and two.flops is not None and two.bytes is not None
    out.time_ratio = two.time_s / base.time_s
    out.flops_ratio = two.flops / base.flops
    out.bytes_ratio = two.bytes / base.bytes
    # The budget's prediction: overhead stays (same ops, same count), memory time scales
    # with bytes and compute time with FLOPs.
    wall = budget.total_s
    predicted = (budget.overhead_s + budget.memory_s * out.bytes_ratio
                 + budget.compute_s * out.flops_ratio) / wall
    out.predicted_time_ratio = predicted
    out.agrees = _agree(out.time_ratio, predicted)
    rt, rf, rb = out.time_ratio, out.flops_ratio, out.bytes_ratio
    text = f"2x batch cost {rt:.2f}x time for {rf:.2f}x FLOPs and {rb:.2f}x bytes"
    if rt < 1.3 and rb < 1.5 and rf > 1.8:
        text += (" (caveat B << D: bytes barely grew, so sub-linear time fits weight-"
                 "bandwidth-bound work as well as overhead)")
    elif rt < 1.3:
        text += ": time barely grew while the work doubled: overhead-bound"
    elif rt > 1.7:
        text += ": time grew with the work: device-bound (compute or memory)"
    text += (f"; budget predicted {predicted:.2f}x, "
             f"{'agrees' if out.agrees else 'DISAGREES'}")
    out.reading = text


def read_graph(g: GraphReplay, budget: Budget) -> GraphReplay:
    """The budget's prediction for graph replay: T_wall -> kernel time."""
    g.predicted_speedup = budget.total_s / budget.busy_s if budget.busy_s > 0 else None
    if g.speedup is not None and g.predicted_speedup is not None:
        g.agrees = _agree(g.speedup, g.predicted_speedup)
    return g


def capture_cuda_graph(fn: Callable[[], Any], warmup: int = 3) -> tuple[Any, Any]:
    """Capture one call of `fn` in a CUDA graph: (graph, the call's static output).

    Warm-up runs on a side stream first, as torch.cuda.graph's docs require (lazy
    initialisation and cuBLAS workspaces must happen outside the capture)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def graph_replay(w: Workload, eager: Timing,
                 timer: Callable[[Callable[[], Any]], Timing]) -> GraphReplay:
    """Capture one call in a CUDA graph and time its replay against eager."""
    if w.device != "cuda":
        return GraphReplay(False, "CUDA graphs need a CUDA device")
    import torch

    graph: Any = None
    try:
        graph, _ = capture_cuda_graph(w)
    except Exception as exc:  # capture refuses many things; each is a reason, not a crash
        torch.cuda.synchronize()
        del graph
        _free_device_memory("cuda")
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return GraphReplay(False, f"capture failed: {type(exc).__name__}: {msg[:300]}")
    t = timer(graph.replay)
    speedup = eager.median_s / t.median_s
    result = GraphReplay(True, None, eager.median_s, t.median_s, speedup)
    del graph
    _free_device_memory("cuda")
    return result

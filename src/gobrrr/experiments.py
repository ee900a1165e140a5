"""The essay's experiments, automated, to establish cause:

- batch scaling: T(2B) / T(B) (and 4B when cheap), read against how FLOPs and bytes
  scale, counted at each size (the essay's caveat: for [B,D] x [D,D] with B << D,
  doubling B doubles FLOPs but barely changes bytes, so sub-linear time can mean low
  intensity, not overhead);
- CUDA-graph replay vs eager: the same kernels with the CPU out of the way.

Each experiment first measures (`batch_times`, `graph_replay`: raw timings, before any
profiling), then is read against the budget (`read_batch`, `read_graph`), which returns
a new, finished value: what the budget predicts and whether the two agree.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gobrrr.budget import Budget
from gobrrr.counting import count
from gobrrr.errors import UserError, first_line
from gobrrr.timing import Timing
from gobrrr.workload import Workload

__all__ = ["BatchTime", "BatchTimes", "BatchPoint", "BatchScaling", "GraphTiming", "Measured",
           "GraphReplay", "batch_times", "batch_counts", "read_batch", "graph_replay",
           "read_graph", "capture_cuda_graph", "batch_rounds", "AGREE_TOLERANCE",
           "BATCH_ROUNDS", "implausible_batch"]

# Experiment and budget agree when the measured ratio is within this relative distance of
# the predicted one: both sides carry noise of a few % and the budget's split is itself an
# estimate, so 25% separates "consistent" from "a different story".
AGREE_TOLERANCE = 0.25
Progress = Callable[[str], None]


@dataclass(frozen=True)
class BatchTime:
    """One timed batch (before any counting)."""

    factor: int
    batch_size: int | None
    time_s: float | None
    error: str | None = None


@dataclass(frozen=True)
class BatchTimes:
    """What `batch_times` measured: the base batch first."""

    points: tuple[BatchTime, ...]
    skipped: str | None = None


@dataclass(frozen=True)
class BatchPoint:
    batch_size: int | None
    factor: int
    time_s: float | None
    flops: int | None
    bytes: int | None
    error: str | None = None


@dataclass(frozen=True)
class BatchScaling:
    """The batch experiment read against the budget (`read_batch`)."""

    points: list[BatchPoint] = field(default_factory=list)
    time_ratio: float | None = None  # T(2B)/T(B)
    flops_ratio: float | None = None
    bytes_ratio: float | None = None
    predicted_time_ratio: float | None = None  # from the budget
    agrees: bool | None = None
    reading: str = ""
    skipped: str | None = None
    # From a batch of 1 the first step may change kernels (`_past_batch_one`): then the
    # check is the 2x -> 4x step, T(4B)/T(2B) against the budget's ratio for that step.
    step_ratio: float | None = None
    predicted_step_ratio: float | None = None

    @property
    def implausible(self) -> bool:
        """The 2x batch took less time than the base batch by more than noise explains
        while its work did not shrink (issue 25: 0.12x the time for 2x the FLOPs): the
        timings were disturbed, so the reading checks nothing (`implausible_batch`)."""
        return implausible_batch(self.time_ratio, self.flops_ratio, self.bytes_ratio)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def implausible_batch(time_ratio: float | None, flops_ratio: float | None,
                      bytes_ratio: float | None) -> bool:
    """T(2B)/T(B) under 1 / (1 + AGREE_TOLERANCE) = 0.8 with FLOPs and bytes not fewer:
    more work cannot take less time, and a few % of noise cannot make 20% of it."""
    if time_ratio is None or flops_ratio is None or bytes_ratio is None:
        return False
    return (time_ratio < 1 / (1 + AGREE_TOLERANCE) and flops_ratio >= 1
            and bytes_ratio >= 1)


@dataclass(frozen=True)
class GraphTiming:
    """What `graph_replay` measured: eager vs the replay of one captured call."""

    possible: bool
    reason: str | None = None
    eager_s: float | None = None
    replay_s: float | None = None


@dataclass(frozen=True)
class Measured:
    """What a live source measured to check the budget (the end, diagnosis.py, reads it
    against the budget): the batch experiment's times and (FLOPs, bytes) by factor, the
    base batch's included; the CUDA-graph replay's times. None: not run."""

    batch: BatchTimes | None = None
    batch_counts: dict[int, tuple[int, int]] = field(default_factory=dict)
    graph: GraphTiming | None = None

    def read(self, budget: Budget) -> tuple[BatchScaling | None, GraphReplay | None]:
        batch = (read_batch(self.batch, self.batch_counts, budget)
                 if self.batch is not None else None)
        graph = read_graph(self.graph, budget) if self.graph is not None else None
        return batch, graph


@dataclass(frozen=True)
class GraphReplay:
    """Graph replay read against the budget (`read_graph`)."""

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


def batch_rounds(call_s: float, time_budget_s: float) -> int:
    """BATCH_ROUNDS, or 1 when one call is longer than the time budget of a measurement:
    each measurement then already takes 3 calls (timing.measure), 3 rounds would be 5 more
    measurements at each size, and a ratio is read against a 25% tolerance, far wider
    than the drift that interleaving cancels."""
    return 1 if call_s > time_budget_s else BATCH_ROUNDS


def batch_times(w: Workload, base: Timing, timer: Callable[[Workload], Timing],
                progress: Progress, rounds: int = BATCH_ROUNDS) -> BatchTimes:
    """Time the workload at 2x (and 4x when 2x took under 50 ms per call) its batch,
    interleaved with the base batch over `rounds` rounds; each point's time is scaled
    from the median of its per-round ratios to the base's median time.

    Run before any profiling: a profiler can leave tracing hooks that slow later kernel
    launches, which would bias an overhead-bound workload's times."""
    base_times = [base.median_s]
    scaled: list[BatchTime] = []
    skipped: str | None = None
    for factor in (2, 4):
        last = scaled[-1] if scaled else None
        if factor == 4 and (last is None or last.time_s is None or last.time_s > 0.05):
            break
        progress(f"experiment: batch scaling, {factor}x batch")
        try:
            big = w.scaled(factor)
        except UserError as exc:  # no way to scale this workload: a limit, not a failure
            skipped = str(exc)
            break
        except Exception as exc:  # the factory raised, or no memory to repeat the inputs
            scaled.append(BatchTime(factor, None, None, first_line(exc)))
            break
        try:
            ratios = []
            for i in range(rounds):
                t_base = base.median_s if (i == 0 and factor == 2) else timer(w).median_s
                if not (i == 0 and factor == 2):
                    base_times.append(t_base)
                ratios.append(timer(big).median_s / t_base)
            scaled.append(BatchTime(factor, big.batch_size,
                                    statistics.median(base_times) * statistics.median(ratios)))
        except Exception as exc:
            # Out of memory (torch.OutOfMemoryError is a RuntimeError), the workload
            # refusing the bigger batch, anything else: record its first line (the caller
            # warns), release the memory, use what ran.
            scaled.append(BatchTime(factor, big.batch_size, None, first_line(exc)))
            break
        finally:
            del big
            _free_device_memory(w.device)
    first = BatchTime(1, w.batch_size, statistics.median(base_times))
    return BatchTimes((first, *scaled), skipped)


def batch_counts(w: Workload, times: BatchTimes
                 ) -> tuple[dict[int, tuple[int, int]], BatchTimes]:
    """(FLOPs, bytes) at each scaled batch that ran, by factor, and the times with the
    error of each batch that could not be counted (no ratio can be read for it)."""
    out: dict[int, tuple[int, int]] = {}
    points = list(times.points)
    for i, p in enumerate(points):
        if p.factor == 1 or p.time_s is None:
            continue
        big: Workload | None = None
        try:
            big = w.scaled(p.factor)
            counts = count(big.run, f"counting at {p.factor}x batch")
            out[p.factor] = (counts.total_flops, counts.total_bytes)
        except Exception as exc:  # recorded on the point: the reading and a warning say it
            points[i] = replace(p, error=first_line(exc))
        finally:
            del big
            _free_device_memory(w.device)
    return out, replace(times, points=tuple(points))


def _failed_reading(points: list[BatchPoint]) -> str:
    failed = next((p for p in points if p.error), None)
    if failed is None:
        return "no 2x measurement"
    if failed.time_s is None:
        return f"the {failed.factor}x batch did not run: {failed.error}"
    return f"the {failed.factor}x batch ran but could not be counted: {failed.error}"


def read_batch(times: BatchTimes, counts: dict[int, tuple[int, int]],
               budget: Budget) -> BatchScaling:
    """The batch experiment against the budget: `counts` holds (FLOPs, bytes) by factor,
    the base batch's (factor 1) included."""
    points = []
    for p in times.points:
        flops, nbytes = counts.get(p.factor, (None, None))
        points.append(BatchPoint(p.batch_size, p.factor, p.time_s, flops, nbytes, p.error))
    if times.skipped or not points:
        return BatchScaling(points, skipped=times.skipped)
    base = points[0]
    two = next((p for p in points if p.factor == 2 and p.time_s), None)
    if two is None or not base.time_s or not base.flops or not base.bytes or \
            two.flops is None or two.bytes is None or two.time_s is None:
        return BatchScaling(points, reading=_failed_reading(points))
    rt = two.time_s / base.time_s
    rf = two.flops / base.flops
    rb = two.bytes / base.bytes
    # The budget's prediction: overhead stays (same ops, same count), memory time scales
    # with bytes and compute time with FLOPs.
    predicted = (budget.overhead_s + budget.memory_s * rb
                 + budget.compute_s * rf) / budget.total_s
    agrees = _agree(rt, predicted)
    text = f"2x batch cost {rt:.2f}x time for {rf:.2f}x FLOPs and {rb:.2f}x bytes"
    if implausible_batch(rt, rf, rb):
        # not a finding: say so rather than read a regime off it (issue 25)
        text += (": implausible, less time for more work, beyond this run's noise: the "
                 "timings were disturbed (other processes, clock changes), so this "
                 f"reading checks nothing (the budget predicted {predicted:.2f}x); rerun "
                 "on a quieter machine")
        # agrees None: it checked nothing, as the sentence says (not a disagreement)
        return BatchScaling(points, rt, rf, rb, predicted, None, text)
    if rt > 2 * max(rf, rb):
        text += (": more than twice the growth of its FLOPs and bytes: a cache cliff, or "
                 "the timings were disturbed (other processes); read with care")
    elif rt < 1.3 and rb < 1.5 and rf > 1.8:
        text += (" (caveat B << D: bytes barely grew, so sub-linear time fits weight-"
                 "bandwidth-bound work as well as overhead)")
    elif rt < 1.3:
        text += ": time barely grew while the work doubled: overhead-bound"
    elif rt > 1.7:
        text += ": time grew with the work: device-bound (compute or memory)"
    text += f"; budget predicted {predicted:.2f}x, {'agrees' if agrees else 'DISAGREES'}"
    step = None if agrees else _past_batch_one(points, budget)
    if step is None:
        return BatchScaling(points, rt, rf, rb, predicted, agrees, text)
    step_rt, step_predicted, step_text = step
    return BatchScaling(points, rt, rf, rb, predicted, _agree(step_rt, step_predicted),
                        text + step_text, step_ratio=step_rt,
                        predicted_step_ratio=step_predicted)


def _scaled_total(budget: Budget, p: BatchPoint, base: BatchPoint) -> float:
    """The budget's time at point `p`: overhead stays, memory scales with bytes and
    compute with FLOPs (read_batch's model)."""
    assert p.bytes and p.flops and base.bytes and base.flops
    return (budget.overhead_s + budget.memory_s * p.bytes / base.bytes
            + budget.compute_s * p.flops / base.flops)


def _past_batch_one(points: list[BatchPoint], budget: Budget
                    ) -> tuple[float, float, str] | None:
    """(T(4B)/T(2B), the budget's ratio for that step, the sentence) when the base batch
    is 1 and the 4x batch was timed and counted, else None. A batch of one is its own
    case for matrix products: libraries run it as matrix-vector kernels (GEMV) and a
    batch of two as matrix-matrix ones, with other fixed costs per call (this CPU's
    64-wide addmm: 4.8 us at batch 1, 9.0 us at batch 2, 2026-12-05). The step from 2x
    to 4x keeps the kernels, so it checks the budget's model where the first step cannot."""
    base = points[0]
    two = next((p for p in points if p.factor == 2), None)
    four = next((p for p in points if p.factor == 4), None)
    if base.batch_size != 1 or two is None or four is None or not two.time_s \
            or not four.time_s or not all((base.flops, base.bytes, two.flops, two.bytes,
                                           four.flops, four.bytes)):
        return None
    measured = four.time_s / two.time_s
    predicted = _scaled_total(budget, four, base) / _scaled_total(budget, two, base)
    verdict = "agrees" if _agree(measured, predicted) else "DISAGREES"
    return measured, predicted, (
        f"; from batch 1 the first step may change kernels (a batch of one runs matrix-"
        f"vector ones), so the check is 2x -> 4x: {measured:.2f}x the time where the "
        f"budget predicted {predicted:.2f}x, {verdict}")


def read_graph(g: GraphTiming, budget: Budget) -> GraphReplay:
    """Graph replay against the budget's prediction: T_wall -> kernel time."""
    predicted = budget.total_s / budget.busy_s if budget.busy_s > 0 else None
    speedup = (g.eager_s / g.replay_s if g.possible and g.eager_s and g.replay_s
               else None)
    agrees = (_agree(speedup, predicted) if speedup is not None and predicted is not None
              else None)
    return GraphReplay(g.possible, g.reason, g.eager_s, g.replay_s, speedup, predicted,
                       agrees)


# torch.optim.Optimizer's attribute: True once it warned that a capturable instance steps
# without a CUDA graph capture (`_accelerator_graph_capture_health_check`).
_WARNED_UNCAPTURED = "_warned_capturable_if_run_uncaptured"
_ABSENT = object()


def make_capturable(optimizers: Sequence[Any]) -> int:
    """Set capturable=True on every param group that has the flag; move step counts to
    the parameter's device (as torch's own load_state_dict does for capturable groups).
    Returns how many groups changed.

    Each optimizer is also marked as having given torch's warning that a capturable
    optimizer steps outside a capture (torch's own warn-once flag,
    _WARNED_UNCAPTURED): gobrrr steps it uncaptured on purpose, in the capture's warm-up
    and in eager's timing beside the replay. On torch 2.11 (H100, session al) the warning
    reached the optimize output from the CUDA-graph remedy's warm-up."""
    import torch

    changed = 0
    for o in optimizers:
        setattr(o, _WARNED_UNCAPTURED, True)
        for g in o.param_groups:
            if "capturable" in g and not g["capturable"]:
                g["capturable"] = True
                changed += 1
        for p, st in o.state.items():
            step = st.get("step")
            if isinstance(step, torch.Tensor) and step.device != p.device:
                st["step"] = step.to(device=p.device, dtype=torch.float32)
    return changed


@contextmanager
def capturable_while(optimizers: Sequence[Any]) -> Iterator[int]:
    """`make_capturable` for the length of the block, then the user's flags back.

    Adam and AdamW refuse a capture unless `capturable=True` ("param_groups' capturable
    is False"); the graph-replay experiment measures the step as the CUDA-graph remedy
    would run it, which sets the flag. On exit each group's flag is put back, and each
    step count goes back to where a group of that kind keeps it: the original tensor,
    with the count reached, for counts that were moved; on the CPU for counts created
    inside the block by a group that is not capturable (nor fused) again."""
    import torch

    flags = [(g, g["capturable"]) for o in optimizers for g in o.param_groups
             if "capturable" in g]
    steps = [(st, st["step"]) for o in optimizers for st in o.state.values()
             if isinstance(st.get("step"), torch.Tensor)]
    warned = [(o, o.__dict__.get(_WARNED_UNCAPTURED, _ABSENT)) for o in optimizers]
    try:
        yield make_capturable(optimizers)
    finally:
        for g, flag in flags:
            g["capturable"] = flag
        for o, was in warned:
            if was is _ABSENT:
                o.__dict__.pop(_WARNED_UNCAPTURED, None)
            else:
                setattr(o, _WARNED_UNCAPTURED, was)
        for st, step in steps:
            now = st.get("step")
            if isinstance(now, torch.Tensor) and now is not step:
                step.copy_(now)
                st["step"] = step
        kept = {id(st) for st, _ in steps}
        for o in optimizers:
            for g in o.param_groups:
                if g.get("capturable") or g.get("fused"):
                    continue
                for p in g["params"]:
                    st = o.state.get(p)
                    if (st is not None and id(st) not in kept
                            and isinstance(st.get("step"), torch.Tensor)
                            and st["step"].device.type != "cpu"):
                        st["step"] = st["step"].cpu()


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
    try:
        with torch.cuda.graph(graph):
            out = fn()
    except Exception:
        _release_generators()
        raise
    return graph, out


def _release_generators() -> None:
    """Take the default CUDA generators out of capture mode after a failed capture.

    A capture that fails (a host sync, a CPU-CUDA copy inside it) fails again in
    `capture_end`, before torch (2.11) calls each generator's capture epilogue: the
    generator stays marked as capturing, and every later random op of the user's program
    raises "Offset increment outside graph capture encountered unexpectedly" (seen on the
    H200: torch.randint in the next test). A clone of the state is the same seed and
    offset, out of capture mode."""
    import torch

    for gen in torch.cuda.default_generators:
        if hasattr(gen, "graphsafe_set_state"):
            gen.graphsafe_set_state(gen.clone_state())


# Interleaved timing of two calls (eager first, then the replay): (eager's median
# seconds per call, the median of eager/replay per round), as remedies/verify.ab_time
# gives them.
Paired = Callable[[Callable[[], Any], Callable[[], Any]], tuple[float, float]]


def graph_replay(w: Workload, eager: Timing,
                 timer: Callable[[Callable[[], Any]], Timing],
                 optimizers: Sequence[Any] = (),
                 paired: Paired | None = None) -> GraphTiming:
    """Capture one call in a CUDA graph and time its replay against eager.

    `optimizers` (those the call reaches) are made capturable for the capture and the
    replays, as the CUDA-graph remedy makes them, so that a training step's replay is
    measured rather than refused (`capturable_while`).
    `paired`, where given, times eager and the replay interleaved, and the speedup is
    its median ratio per round: timed one after the other (`timer`, eager's `Timing`
    from before), a stretch of contention (a compile in the background, on the GPU and
    the host) falls on one side only. On the H100 (session ai) a training step read
    52.7 ms -> 64.8 ms (0.81x) that way beside a background compile, and 52.2 -> 50.9 ms
    without it. Paired, eager runs with the optimizers made capturable, as the replay
    does."""
    if w.device != "cuda":
        return GraphTiming(False, "CUDA graphs need a CUDA device")
    with capturable_while(optimizers):
        return _capture_and_time(w, eager, timer, paired)


def _capture_and_time(w: Workload, eager: Timing,
                      timer: Callable[[Callable[[], Any]], Timing],
                      paired: Paired | None) -> GraphTiming:
    import torch

    graph: Any = None
    try:
        graph, _ = capture_cuda_graph(w)
    except Exception as exc:  # capture refuses many things; each is a reason, not a crash
        torch.cuda.synchronize()
        del graph
        _free_device_memory("cuda")
        return GraphTiming(False, f"capture failed: {first_line(exc, 300)}")
    try:
        if paired is not None:
            eager_s, speedup = paired(w, graph.replay)
            return GraphTiming(True, None, eager_s, eager_s / speedup)
        t = timer(graph.replay)
    except Exception as exc:  # a replay can fail where the capture passed: a reason too
        return GraphTiming(False, f"replay failed: {first_line(exc, 300)}")
    finally:
        del graph
        _free_device_memory("cuda")
    return GraphTiming(True, None, eager.median_s, t.median_s)

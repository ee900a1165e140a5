"""Honest timers: what a user waits per call, on CPU and CUDA.

Shape after triton's `do_bench`: a time budget rather than an iteration count, warm-up
that absorbs first-call costs (lazy init, cuDNN/cuBLAS heuristics, torch.compile,
autotuning), then repeated samples until their spread is small or the budget is spent.

Why a sample is a loop of calls: a call of a few microseconds cannot be timed alone with a
host clock (a `cuda.synchronize` costs about as much as the call), so each sample times
`calls_per_sample` back-to-back calls between two synchronizations and divides. That is
also what a training loop sees: calls back to back, the CPU free to run ahead of the GPU.

Under torchrun the same loop runs on every rank with a coordinator (coordinator.py):
rank 0 decides every count of calls, every rank's samples are shared.

Nothing here ever runs under the profiler: profiling inflates the CPU time that
*is* the overhead gobrrr measures (see trace.py for the separate profiled run).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gobrrr.coordinator import SOLO, Coordinator

__all__ = ["Timing", "measure", "measure_ranks", "summarize", "device_sync",
           "SPENT_MIN_SAMPLES", "MIN_SAMPLES", "from_samples", "time_call", "few_samples_note"]

Clock = Callable[[], float]


@dataclass(frozen=True)
class Timing:
    """Statistics of per-call times, in seconds."""

    median_s: float
    iqr_s: float
    min_s: float
    max_s: float
    n_samples: int
    calls_per_sample: int
    warmup_calls: int
    noisy: bool  # the spread never fell under the threshold within the budget
    rel_iqr: float  # iqr / median
    samples_s: tuple[float, ...]
    # T_wall of each independent run when `doctor --repeat` ran the same command in fresh
    # processes (this one first): what varies between runs, which the samples of one run
    # cannot show (compare.py gates time on it). Empty for one run.
    runs_s: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples_s"] = list(self.samples_s)
        if self.runs_s:
            d["runs_s"] = list(self.runs_s)
        else:
            del d["runs_s"]
        return d


def summarize(samples_s: Sequence[float]) -> tuple[float, float, float, float]:
    """(median, iqr, min, max) of the samples; quartiles by the inclusive method, so a
    sample of identical values has an IQR of exactly 0."""
    if not samples_s:
        raise ValueError("no samples")
    med = statistics.median(samples_s)
    if len(samples_s) >= 2:
        q1, _, q3 = statistics.quantiles(samples_s, n=4, method="inclusive")
    else:
        q1 = q3 = samples_s[0]
    return med, q3 - q1, min(samples_s), max(samples_s)


def device_sync(device: str) -> Callable[[], None]:
    """The synchronization that makes a host clock honest on `device`."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def time_call(fn: Callable[[], Any], device: str) -> float:
    """Seconds of one call of `fn`, between two syncs: an estimate to plan with (how long
    a candidate will take), never a measurement to report (that is `measure`)."""
    sync = device_sync(device)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


# Once the budget is spent a measurement stops at this many samples: a median of two
# calls, never one call's luck, and no more (see `measure` on slow calls).
SPENT_MIN_SAMPLES = 2
MIN_SAMPLES = 5  # the samples a measurement takes when its budget allows (issue 25)


def measure(fn: Callable[[], Any], **kw: Any) -> Timing:
    """Time `fn()` per call: `measure_ranks`' Timing of this rank (the keyword arguments
    are its own)."""
    return measure_ranks(fn, **kw)[0]


def measure_ranks(
    fn: Callable[[], Any],
    *,
    device: str = "cpu",
    budget_s: float = 1.0,
    warmup_calls: int = 2,
    warmup_s: float = 0.05,
    min_samples: int = MIN_SAMPLES,
    max_samples: int = 100,
    max_rel_iqr: float = 0.05,
    min_sample_s: float = 1e-3,
    max_calls_per_sample: int = 10_000,
    clock: Clock = time.perf_counter,
    sync: Callable[[], None] | None = None,
    coordinator: Coordinator = SOLO,
) -> tuple[Timing, list[Timing]]:
    """(this rank's Timing, every rank's Timing) of `fn()` per call. One process: the
    same Timing twice over (SOLO). Under torchrun every decision is rank 0's and every
    sample is shared (coordinator.py), so every rank makes exactly the same calls, and a
    rank's spread stops the measurement only when every rank's is small.

    The budget counts every call after the first (warm-up included; the first call
    carries one-time costs such as compiling, which no budget should pay for). Once it is
    spent the measurement stops as soon as it has SPENT_MIN_SAMPLES samples, whatever
    min_samples and warmup_calls say, and the warm-up's last call counts as a sample when
    it was a single warm call. So a call longer than the budget is made exactly 3 times:
    the first, one warm call that is also the first sample, one more sample.

    No L2 flush between calls, on purpose: T_wall is what back-to-back calls cost, as in
    a training loop, where a small kernel's inputs are often still in L2 because the
    previous kernel just wrote them (benchmarks/l2_flush.py measures the difference).
    clock, sync: injectable so tests can drive the timer with a stub clock.
    """
    if sync is None:
        sync = device_sync(device)
    coord = coordinator

    def timed(n_calls: int) -> float:
        """Seconds per call of `n_calls` back-to-back calls between two syncs."""
        sync()
        t0 = clock()
        for _ in range(n_calls):
            fn()
        sync()
        return (clock() - t0) / n_calls

    # Warm-up: at least `warmup_calls` calls and `warmup_s` seconds, but never past the
    # budget. The fastest warm call (not the first) estimates the call time.
    start = clock()
    warm_s = [timed(1)]
    budget_from = clock()  # the first call's one-time costs are outside the budget
    spent = False
    while True:
        elapsed = clock() - start
        spent = clock() - budget_from >= budget_s
        stop = spent or (len(warm_s) >= warmup_calls
                         and (elapsed >= warmup_s or elapsed >= budget_s))
        spent, stop = coord.decide((spent, stop), "ending the warm-up")
        if stop:
            break
        warm_s.append(timed(1))
    est_s = coord.decide(min(warm_s[1:]) if len(warm_s) > 1 else warm_s[0],
                         "agreeing on calls per sample")

    want = min_sample_s / est_s if est_s > 0 else max_calls_per_sample
    calls_per_sample = int(min(max(1, math.ceil(want)), max_calls_per_sample))

    # A warm call that alone spent the budget is a sample already: calling again only to
    # discard it would time a slow call a fourth time.
    reuse = spent and len(warm_s) > 1 and calls_per_sample == 1
    everyone: list[list[float]] = [[] for _ in range(coord.size)]
    if reuse:
        for r, t in enumerate(coord.share(warm_s[-1], "sharing a timing sample")):
            everyone[r].append(float(t))
    rel = math.inf
    while True:
        sample = timed(calls_per_sample)
        mine_spent = clock() - budget_from >= budget_s
        got = coord.share((sample, mine_spent), "sharing a timing sample")
        for r, (t, _spent) in enumerate(got):
            everyone[r].append(float(t))
        spent = bool(got[0][1])  # rank 0's clock
        n = len(everyone[0])
        rel = max(_rel_iqr(samples) for samples in everyone)
        if n >= max_samples:
            break
        if n >= min_samples and (rel <= max_rel_iqr or spent):
            break
        if spent and n >= SPENT_MIN_SAMPLES:
            break
    timings = [from_samples(samples, calls_per_sample, len(warm_s), max_rel_iqr)
               for samples in everyone]
    return timings[coord.rank], timings


def few_samples_note(t: Timing, budget_s: float) -> str | None:
    """What a report says when T_wall has fewer than MIN_SAMPLES samples (a call longer
    than the budget allows): how many, why, and the budget that would give MIN_SAMPLES
    (the first call is outside it, the warm-up's calls inside); None with enough."""
    if t.n_samples >= MIN_SAMPLES:
        return None
    per_sample_s = t.median_s * t.calls_per_sample
    need_s = per_sample_s * (MIN_SAMPLES + max(0, t.warmup_calls - 1))
    return (f"T_wall is the median of {t.n_samples} samples, fewer than {MIN_SAMPLES}: a "
            f"call takes {per_sample_s:.3g} s and the time budget is {budget_s:g} s; "
            f"--time-budget {math.ceil(need_s):g} would give {MIN_SAMPLES}")


def _rel_iqr(samples: Sequence[float]) -> float:
    med, iqr, _, _ = summarize(samples)
    return iqr / med if med > 0 else 0.0


def from_samples(samples: Sequence[float], calls_per_sample: int = 1, warmup_calls: int = 0,
                 max_rel_iqr: float = 0.05) -> Timing:
    """The statistics of per-call samples (a trace's step spans: one call per sample,
    no warm-up), noisy when their spread exceeds `max_rel_iqr`."""
    med, iqr, lo, hi = summarize(samples)
    rel = iqr / med if med > 0 else 0.0
    return Timing(median_s=med, iqr_s=iqr, min_s=lo, max_s=hi, n_samples=len(samples),
                  calls_per_sample=calls_per_sample, warmup_calls=warmup_calls,
                  noisy=rel > max_rel_iqr, rel_iqr=rel, samples_s=tuple(samples))


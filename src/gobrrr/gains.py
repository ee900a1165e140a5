"""Predicted gains: the seconds of the budget a remedy removes, as a whole-workload speedup.

One arithmetic for every prediction, in `gobrrr doctor` and `gobrrr optimize` alike (each
remedy of gobrrr.remedies.catalog predicts through it):

- A gain is seconds saved per call, by the part of the budget they come out of
  (overhead, memory, compute; communication in a distributed budget), and the speedup
  T / (T - saved) (Amdahl).
- A remedy that adds work saves a negative amount of its part (bf16 autocast's casts: the
  memory-bound time of their kernels) or adds host work per call (`Gain.host_added_s`:
  their dispatch), which raises the issue time it leaves; a replay issues none of it.
- Gains of several remedies combine part by part: savings from different parts add; two
  savings from one part each remove their share of what the other leaves (a remedy that
  removes 50% of the overhead, with another that removes 20% of it, removes 60%, not 70%).
  So a combination never predicts more time saved than the budget holds. One mechanism
  counts once (`Gain.by_mechanism`): reduce-overhead and freezing both credit Inductor's
  fusion, which one compile does once (on the H200 ResNet-50 b256's bf16 cast +
  channels_last + reduce-overhead + freezing stack was predicted 6.16x with the fusion
  taken twice, and measured 3.19x); one a mechanism of another remedy in the stack does
  wholly counts not at all (`SUBSUMED_BY`: a replay issues no launch, so the default
  compile's fewer launches add nothing beside reduce-overhead).
- What can be removed of the overhead is the dispatch of the ops that ran (`host_time`):
  n_ops x the measured cost of one tiny op, at most the overhead; host time outside
  PyTorch ops (Python, a sleep, data loading) stays, whatever the remedy.
- On CUDA the host issues a call while the GPU runs it: a call cannot end before the
  host has issued it. Where the budget holds the measured issue time
  (`Budget.host_issue_s`), the time after a remedy is max(T - saved, the issue time it
  leaves): a remedy that shortens kernels only leaves all of it (on the H200 BERT-base's
  bf16 cast was predicted 6.67x by T - saved and measured 2.28x; with CUDA graphs, which
  remove the issuing, 4.02x); one that removes host work (dispatch, autograd, optimizer
  ops: its overhead saving) leaves the issue time less that saving; a CUDA-graph replay
  leaves what `Gain.host_left_s` says, also where it has no idle time to save alone (a
  device-bound call: beside a remedy that shortens the kernels it still lifts the floor).
- Host and GPU overlap less than `max` says when their times are close: the time after is
  at least (D'^p + H'^p)^(1/p) (OVERLAP_P), D' the GPU's busy time left and H' the issue
  time left, scaled so that the call as measured is not predicted slower than it ran.
  An empirical fit, not a model of the pipeline. p = 2 fits the calls as they ran: on
  the H200 (session h, `benchmarks/results/h200/session-2026-12-02h/pred/`) the root of
  the squares of D and H was within 3% of T_wall on 7 of 9 workloads (BERT-base 23.57
  against 23.47 ms; the sum, 28.66, is too much: the host does issue while the GPU
  runs), and it brings the 41 eager single-remedy measurements within 1.5x of the
  prediction from 31 to 35 (p = 1: 36; p = 3: 33; p = 4: 32; `pred/overlap_fit.py`);
  BERT-base's bf16 cast 3.94x -> 2.98x, measured 2.28x. Where the issue time dominates
  (GPT-2 at batch 1) it leaves `max`'s answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gobrrr.phases import dispatched_ops
from gobrrr.units import fmt_s as _fmt_s

if TYPE_CHECKING:
    from gobrrr.budget import Budget
    from gobrrr.hardware import Ceilings

__all__ = ["Gain", "speedup_from_saved", "gain_from_saved", "combine", "HostTime",
           "host_time", "part_seconds", "host_floor_s", "speedup_with_floor", "time_floor_s",
           "OVERLAP_P", "predicted_loss"]


def speedup_from_saved(total_s: float, saved_s: float) -> float | None:
    """Whole-workload speedup when `saved_s` of `total_s` disappears (Amdahl). None when
    nothing is saved, or when everything would be: a budget never explains a time of
    zero (some work the remedy does not touch remains), so that is no prediction."""
    if total_s <= 0 or saved_s <= 0 or saved_s >= total_s:
        return None
    return total_s / (total_s - saved_s)


@dataclass(frozen=True)
class Gain:
    """A predicted gain. `speedup` is the whole-workload factor (None: the budget predicts
    none, `basis` says why); `saved_s` the seconds per call it removes, by budget part
    (empty for a gain that is not a time saving: throughput advice)."""

    speedup: float | None
    basis: str
    saved_s: dict[str, float] = field(default_factory=dict)
    # the host's issue time per call left after the remedy, where the remedy sets it (a
    # replay: none of the issuing stays); None: the issue time less the overhead saved
    host_left_s: float | None = None
    # the gain when the step is also compiled, where that differs: Inductor pads the
    # unaligned GEMMs a precision remedy leaves slow in eager (gemm_probe.py); `combine`
    # takes it for a stack that compiles
    under_compile: Gain | None = None
    # host work the remedy adds to each call (autocast's cast ops: a dispatch each), onto
    # the issue time it leaves; none where a replay sets `host_left_s`
    host_added_s: float = 0.0
    # `saved_s` by the mechanism behind each saving (savings.py: "fusion", "replay", ...),
    # where the gain was built from mechanisms: `combine` counts each mechanism once
    by_mechanism: dict[str, dict[str, float]] = field(default_factory=dict)
    # what the basis ends with that a stack holding this gain must say too (why it is an
    # upper bound: remedies/compiled.TRAINING_REPLAY_NOTE); `combine` keeps it
    caveat: str = ""

    @classmethod
    def none(cls, basis: str) -> Gain:
        return cls(None, basis)


def part_seconds(b: Budget) -> dict[str, float]:
    """The budget's parts (communication too, in a distributed budget)."""
    return dict(b.parts_s)


def host_floor_s(b: Budget, saved: dict[str, float], host_left_s: float | None,
                 host_added_s: float = 0.0) -> float:
    """The host's issue time left after a remedy (module docstring): what the remedy
    says (`host_left_s`), else the measured issue time less the overhead it saves plus
    the host work it adds; 0 where none was measured (CPU, traces: the budget alone)."""
    if b.host_issue_s is None:
        return 0.0
    if host_left_s is not None:
        return min(host_left_s, b.host_issue_s)
    return max(0.0, b.host_issue_s - max(0.0, saved.get("overhead", 0.0)) + host_added_s)


# The p of the overlap of host and GPU time (module docstring).
OVERLAP_P = 2.0
# Mechanisms another one in the same stack does wholly: a CUDA graph's replay issues no
# launch, so the default compile's fewer launches (freezing alone compiles in the default
# mode and credits them) remove nothing beside it. On an H100 (session ah) GPT-2 8x512's
# bf16 cast + reduce-overhead was predicted 8.71x and with freezing added 9.95x (measured
# 8.44x), the GPU-idle time between launches taken again; the search ran the freezing
# stack for its larger prediction, where the hand search's best had no freezing (8.94x).
# Likewise Inductor's fusion of a compiled step's optimizer ops: the fusion estimate
# (fusion_estimate.py, rules 1-3) takes a foreach AdamW's update to what a fused one
# moves (7 x the parameter bytes, and the step counts), so a fused optimizer's bytes
# saved are inside the fusion's. Counted twice, the GPT-2 training step's stack (fused
# AdamW + bf16 autocast + reduce-overhead; H100, session aj) kept 0.28 of eager's memory
# part from those two, where 0.34 is right; predicted 8.26x, measured 4.30x.
SUBSUMED_BY = {"fewer_launches": "replay", "optimizer_bytes": "fusion"}


def _overlapped(device_s: float, host_s: float) -> float:
    return (device_s ** OVERLAP_P + host_s ** OVERLAP_P) ** (1.0 / OVERLAP_P)


def time_floor_s(b: Budget, saved: dict[str, float], host_left_s: float | None,
                 host_added_s: float = 0.0) -> float:
    """The least time a call takes after a remedy, from the host's issue time it leaves
    and the GPU time it leaves overlapped (module docstring); 0 where no issue time was
    measured."""
    floor_s = host_floor_s(b, saved, host_left_s, host_added_s)
    if floor_s <= 0 or b.host_issue_s is None:
        return 0.0
    device_left_s = max(0.0, b.busy_s - sum(v for k, v in saved.items() if k != "overhead"))
    as_ran = _overlapped(b.busy_s, b.host_issue_s)
    scale = min(1.0, b.total_s / as_ran) if as_ran > 0 else 1.0
    return max(floor_s, scale * _overlapped(device_left_s, floor_s))


def speedup_with_floor(b: Budget, saved: dict[str, float],
                       host_left_s: float | None = None,
                       host_added_s: float = 0.0) -> float | None:
    """T / max(T - saved, the least time left, `time_floor_s`): `speedup_from_saved`
    with the host's issue time and its overlap with the GPU as a floor under the time
    after the remedy."""
    total = sum(saved.values())
    floor_s = time_floor_s(b, saved, host_left_s, host_added_s)
    if floor_s <= b.total_s - total:
        return speedup_from_saved(b.total_s, total)
    return speedup_from_saved(b.total_s, b.total_s - floor_s)


def gain_from_saved(b: Budget, saved_by_part: dict[str, float], basis: str,
                    host_left_s: float | None = None, host_added_s: float = 0.0) -> Gain:
    """A gain of `saved_by_part` seconds per call (each capped by its part of the budget:
    a remedy cannot remove more of the overhead than there is; negative: time it adds),
    floored by the host's issue time it leaves, `host_added_s` included (module
    docstring)."""
    parts = part_seconds(b)
    saved = {p: min(s, parts.get(p, 0.0)) for p, s in saved_by_part.items() if s != 0}
    if host_left_s is not None:
        host_added_s = 0.0
    speedup = speedup_with_floor(b, saved, host_left_s, host_added_s)
    floor_s = time_floor_s(b, saved, host_left_s, host_added_s)
    if floor_s > b.total_s - sum(saved.values()) and speedup is not None:
        issue_left_s = host_floor_s(b, saved, host_left_s, host_added_s)
        basis += (f"; the host issues a call in {_fmt_s(b.host_issue_s or 0.0)} "
                  f"(measured): {_fmt_s(issue_left_s)} of it stays, and with the GPU's "
                  f"time left it overlaps only in part (fit on H200 rows), so a call takes "
                  f"at least {_fmt_s(floor_s)} ({speedup:.2f}x)")
    return Gain(speedup, basis, saved, host_left_s, host_added_s=host_added_s)


def predicted_loss(b: Budget | None, gain: Gain) -> float | None:
    """The speedup, under 1, of a gain whose savings add up to time added (a compiled
    call's own host work beyond the dispatch it removes: savings.compiled_call), which
    `speedup` leaves None as no gain; None for any other gain."""
    added_s = -sum(gain.saved_s.values())
    if b is None or gain.speedup is not None or added_s <= 0 or b.total_s <= 0:
        return None
    return b.total_s / (b.total_s + added_s)


def combine(b: Budget, gains: Sequence[Gain], names: Iterable[str] = (),
            compiled: bool = False) -> Gain:
    """The gain of several remedies applied together (module docstring: part by part,
    each removing its share of what the others leave); `compiled`: one of them compiles
    the step, so each part's `under_compile` gain stands for it where it has one."""
    if compiled:
        gains = [g.under_compile or g for g in gains]
    parts = part_seconds(b)
    remaining = dict.fromkeys(parts, 1.0)
    adds: dict[str, float] = {}  # negative savings (time a remedy adds) simply add up
    seen: set[str] = set()  # mechanisms already counted
    present = {m for g in gains for m in g.by_mechanism}
    seen.update(m for m, by in SUBSUMED_BY.items() if by in present)
    for g in gains:
        own = g.saved_s
        if g.by_mechanism:  # its mechanisms not counted yet; within one remedy they add
            own = {}
            for m, seconds in g.by_mechanism.items():
                if m not in seen:
                    for p, s in seconds.items():
                        own[p] = own.get(p, 0.0) + s
            seen.update(g.by_mechanism)
        for p, s in own.items():
            if s < 0:
                adds[p] = adds.get(p, 0.0) + s
            elif parts.get(p, 0.0) > 0:
                remaining[p] *= max(0.0, 1.0 - s / parts[p])
    saved = {p: parts.get(p, 0.0) * (1.0 - remaining.get(p, 1.0)) + adds.get(p, 0.0)
             for p in {*parts, *adds}}
    labels = list(names) or [f"part {i + 1}" for i in range(len(gains))]
    shown = [f"{n} {g.speedup:.2f}x" for n, g in zip(labels, gains, strict=False)
             if g.speedup]
    if not shown:
        return Gain.none("no part predicts a gain")
    caveat = "".join(dict.fromkeys(g.caveat for g in gains if g.caveat))
    basis = ("; ".join(shown) + ": savings from different parts of the budget add, "
             "savings from one part each remove their share of what the others leave"
             + caveat)
    kept = {p: s for p, s in saved.items() if s != 0}
    lefts = [g.host_left_s for g in gains if g.host_left_s is not None]
    host_left = min(lefts) if lefts else None
    # a replay issues the added host work too (host_floor_s)
    added = 0.0 if host_left is not None else sum(g.host_added_s for g in gains)
    return Gain(speedup_with_floor(b, kept, host_left, added), basis, kept, host_left,
                host_added_s=added, caveat=caveat)


@dataclass(frozen=True)
class HostTime:
    """The budget's overhead split by what an overhead remedy can remove, per call."""

    n_ops: int  # dispatched aten ops of one call, views included (each is a dispatch)
    dispatch_s: float  # n_ops x the measured per-op cost, at most the overhead
    outside_s: float  # the rest: host time outside PyTorch ops (Python, sleep, ...)
    loading_s: float = 0.0  # the measured wait for data (budget.data_loading_s), apart


def host_time(b: Budget, records: Sequence[Any], ceil: Ceilings) -> HostTime:
    """What torch.compile or CUDA graphs can remove is the dispatch (and launch) work of
    the ops that ran: n_ops x the measured cost of one tiny op is a fair upper estimate
    of it. The measured wait for data comes off first (it is measured; the dispatch is
    estimated); overhead beyond both (on CUDA, GPU-idle time beyond them) is host time
    that is not PyTorch dispatch, such as a sleep: no remedy here removes it."""
    n_ops = dispatched_ops(records)
    loading_s = min(b.overhead_s, b.data_loading_s or 0.0)
    dispatch_s = min(b.overhead_s - loading_s, n_ops * ceil.op_overhead_s)
    return HostTime(n_ops, dispatch_s, b.overhead_s - loading_s - dispatch_s, loading_s)

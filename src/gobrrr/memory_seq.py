"""The sequence length that fits (issue 26, item 2, for sequence models): one step's
memory (memory.py) at the target's sequence length L, 2L, 4L, ..., read as a quadratic
in the length (per token: activations and the logits grow with L; attention that
materialises its scores grows with L squared), then the longest sequence whose predicted
peak fits the memory this process can use, bounded by the model's positions.

- A training step's peak is the larger of two: while activations are alive, and at the
  optimizer step (parameters, gradients and optimizer state, none of it growing with L).
  At short lengths the second wins and the peak does not move (GPT-2 small training at 16
  to 64 tokens, batch 2, on CPU: 2.30 GB, 512 bytes apart). So the length doubles until
  the peak grows by more than GROWTH of itself for two doublings in a row (three points
  on the growing part), the model's positions are reached, a length runs out of memory,
  or MAX_POINTS lengths were measured.
- The last three growing points fix peak(L) = a + b L + c L^2 exactly. A fused attention
  (SDPA's flash or memory-efficient kernels) stores no L x L scores and c comes out near
  zero; a negative c (measurement rounding) is taken as 0 and the line through the two
  longest points is used; with two growing points only, the line through them; with one,
  no prediction (its lower point may sit on the flat part): each is said. Where the
  peak never grew, memory does not bound the length up to the longest measured: the
  positions do, when that length is theirs.
- Capacity as for the batch (memory_fit.capacity_bytes); HEADROOM of it.
- Checked on CUDA by running the predicted length and the next one up (+10%), each in a
  fresh process where a target can be rebuilt (memory_fit.child_probe); a predicted
  length that runs out of memory is bisected from 4L, as for the batch.
Approximate like the batch fit; the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gobrrr.memory import MemoryProfile
from gobrrr.memory_fit import (
    HEADROOM,
    Probe,
    allocated_bytes,
    bisect_largest,
    capacity_bytes,
    check_sizes,
    free_memory,
    is_oom,
)

__all__ = ["SeqLenFit", "fit_seq_len", "QUADRATIC_NOTE", "GROWTH", "MAX_POINTS"]

GROWTH = 0.01  # a doubling that adds less than this share to the peak: not growing
MAX_POINTS = 8  # lengths measured at most (L to 128 L)

QUADRATIC_NOTE = ("approximate: peak bytes taken as a quadratic in the sequence length "
                  "through three lengths (allocator rounding and kernels that change "
                  "with the length make steps)")


@dataclass
class SeqLenFit:
    seq_lens: list[int]
    peaks_bytes: list[int]
    coefficients: list[float]  # a, b, c of peak = a + b L + c L^2 (bytes, per token, ...)
    capacity_bytes: int | None
    capacity_source: str
    max_positions: int | None  # the model's own bound (max_position_embeddings)
    predicted_max_seq_len: int | None  # within the capacity and the positions
    limited_by: str | None  # "memory" | "positions"
    checked: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _coefficients(lens: list[int], peaks: list[int]) -> tuple[float, float, float, bool]:
    """(a, b, c, quadratic): through three points; c < 0 -> the line through the last
    two (quadratic False)."""
    (l1, l2, l3), (p1, p2, p3) = lens, peaks
    d1 = (p2 - p1) / (l2 - l1)
    d2 = (p3 - p2) / (l3 - l2)
    c = (d2 - d1) / (l3 - l1)
    if c >= 0:
        b = d1 - c * (l1 + l2)
        return p1 - b * l1 - c * l1 * l1, b, c, True
    return p2 - d2 * l2, d2, 0.0, False


def _longest(a: float, b: float, c: float, budget: float) -> int | None:
    """The largest integer L with a + b L + c L^2 <= budget (None if none grows)."""
    if c > 0:
        disc = b * b - 4 * c * (a - budget)
        return max(0, math.floor((-b + math.sqrt(disc)) / (2 * c))) if disc >= 0 else 0
    if b > 0:
        return max(0, math.floor((budget - a) / b))
    return None


def fit_seq_len(measure_at: Callable[[int], MemoryProfile], seq_len: int, device: str, *,
                max_positions: int | None = None,
                capacity: Callable[[str, MemoryProfile], tuple[int | None, str]]
                = capacity_bytes,
                check: bool | None = None, probe: Probe | None = None,
                progress: Callable[[str], None] | None = None) -> SeqLenFit:
    """The longest sequence that fits (module docstring). `measure_at(L)`: the step's
    memory at length L; `probe(L)`: a check's run (its peak bytes, or the exception)."""
    from gobrrr.errors import UserError

    say = progress or (lambda _m: None)
    if seq_len < 1 or (max_positions is not None and 2 * seq_len > max_positions):
        raise UserError(f"--fit-seq-len doubles the length from --seq-len {seq_len}; the "
                        f"model has {max_positions} positions: give at most "
                        f"{(max_positions or 2) // 2}")
    lens: list[int] = []
    profiles: list[MemoryProfile] = []
    notes = [QUADRATIC_NOTE]
    oom_at: int | None = None
    n = seq_len
    while len(lens) < MAX_POINTS and (max_positions is None or n <= max_positions):
        say(f"memory at sequence length {n}")
        try:
            prof = measure_at(n)
        except Exception as exc:
            if not is_oom(exc):
                raise
            oom_at = n
            notes.append(f"sequence length {n} ran out of memory while measuring")
            free_memory(device)
            break
        lens.append(n)
        profiles.append(prof)
        if _growing(profiles) >= 3:
            break
        n *= 2
    if len(lens) < 2:
        raise UserError(f"sequence length {lens[0] if lens else seq_len} alone was "
                        "measured: nothing to fit (a shorter --seq-len)")
    peaks = [p.peak_bytes for p in profiles]
    grow = _growing(profiles)
    a = b = c = 0.0
    if grow >= 3:
        a, b, c, quadratic = _coefficients(lens[-3:], peaks[-3:])
        if not quadratic:
            notes.append("the peak grew less than linearly between the last lengths: the "
                         "line through the two longest is used")
        elif c * lens[-1] ** 2 < 0.01 * peaks[-1]:
            notes.append("the squared term is under 1% of the longest peak: no L x L "
                         "attention scores are kept (a fused attention kernel)")
    elif grow == 2:
        b = (peaks[-1] - peaks[-2]) / (lens[-1] - lens[-2])
        a = peaks[-1] - b * lens[-1]
        notes.append("two doublings grew the peak: the line through the two longest "
                     "is used (it undercounts a squared term)")
    elif grow == 1:
        notes.append(f"only the last doubling ({lens[-2]} to {lens[-1]} tokens) grew the "
                     "peak: too few points on its growing part to predict")
    cap, source = capacity(device, profiles[0])
    predicted: int | None = None
    limited_by: str | None = None
    if grow == 0:
        notes.append(f"the peak did not grow with the length from {lens[0]} to {lens[-1]} "
                     "tokens (the optimizer step's or the weights' peak is larger)")
        if max_positions is not None and lens[-1] == max_positions:
            predicted, limited_by = max_positions, "positions"
    elif cap is not None and grow >= 2:
        predicted = _longest(a, b, c, HEADROOM * cap)
        limited_by = "memory" if predicted is not None else None
    if oom_at is not None and predicted is not None and predicted >= oom_at:
        predicted, limited_by = oom_at - 1, "memory"
        notes.append(f"below {oom_at} tokens, which ran out of memory")
    if (max_positions is not None and predicted is not None and predicted > max_positions):
        predicted, limited_by = max_positions, "positions"
    if limited_by == "positions":
        notes.append(f"the model's {max_positions} positions bound the length before "
                     "memory does")
    fit = SeqLenFit(lens, peaks, [a, b, c], cap, source, max_positions, predicted,
                    limited_by, None, notes)
    if check is None:
        check = device == "cuda"
    if check and predicted and limited_by == "memory":
        free_memory(device)
        base = allocated_bytes(device) if probe is None else None  # the workload's own
        run = probe or (lambda n: measure_at(n).peak_bytes)
        fit.checked = check_sizes(run, device, predicted, say, unit="seq_len")
        if fit.checked["predicted"].get("oom"):
            fit.checked["largest_ran"] = bisect_largest(run, device, lens[-1], predicted,
                                                        say, base, unit="seq_len")
    elif predicted and device != "cuda" and limited_by == "memory":
        notes.append("not checked by running it: out of memory on a CPU is the kernel "
                     "killing the process, not an exception")
    return fit


def _growing(profiles: list[MemoryProfile]) -> int:
    """How many of the last doublings in a row grew the peak by more than GROWTH."""
    count = 0
    for prev, cur in zip(profiles[-2::-1], profiles[::-1], strict=False):
        if cur.peak_bytes - prev.peak_bytes <= GROWTH * prev.peak_bytes:
            break
        count += 1
    return count

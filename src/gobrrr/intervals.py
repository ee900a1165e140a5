"""Interval arithmetic on a trace's timelines, the one implementation every stage uses:
the union of intervals, one set minus another, clipping to a window, the time of each
interval inside a set of windows, and busy time.

Conventions:
- An interval is half-open, [start, end): t is inside when start <= t < end. Two
  intervals that touch (one ends where the next starts) share no point, and a union joins
  them into one: a kernel that starts as the previous one ends leaves no idle gap, and no
  caller wants a seam there.
- Times are in the caller's unit, one unit per call, never converted: every caller today
  passes the Chrome trace's microseconds, and seconds would work the same. Two things are
  tied to microseconds and say so in their names: `busy_us` (its float tolerance is
  1e-3 us) and the list conveniences `total_us` and `exposed_us` (their callers hold
  (start_us, end_us) pairs: dist/comm.py's RankTrace, lab/trace.py's kernel intervals).
- Empty intervals (end <= start) cover nothing: `union` drops them (dist/comm.py and
  dist/commread.py rely on that), except with `keep_empty=True`, which keeps every
  interval as given: dist/analyze.py's collective-op windows need it (a zero-length op
  still claims the events at its timestamp: its membership test is closed at the end),
  and tracefile/steps.py's step spans keep theirs as they always did.
- The bulk path is numpy: a (starts, ends) pair of float arrays of one length, in any
  order, overlapping or not. `union` and `subtract` return new arrays, sorted and
  disjoint; `clip` keeps its input's order. A rank trace of a long job has millions of
  kernels: the array functions never loop in Python per interval. The list-of-tuples
  conveniences (`Interval`) convert and call them.
- Results of `union`, `subtract` and `clip` are input values (min and max, never a sum or
  a difference), so they carry no new float error. Lengths are differences; `total_us`
  and `exposed_us` add them in order, left to right.

The one implementation, as HTA has one (`hta/common/utils.py` merge_kernel_intervals):
tracefile/steps.py, dist/comm.py, dist/commread.py and lab/trace.py each had their own
before (and dist/analyze.py borrowed steps' private one).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["Interval", "union", "subtract", "clip", "covered", "busy_us", "as_arrays",
           "as_list", "subtract_list", "total_us", "exposed_us"]

Interval = tuple[float, float]  # (start_us, end_us)


def _runs(s: np.ndarray, e: np.ndarray, *, join_touching: bool
          ) -> tuple[np.ndarray, np.ndarray]:
    """(first index of each run of overlapping intervals, the running maximum of the
    ends) of intervals sorted by start: a new run starts where an interval starts after
    every interval before it ended (or as it ended, unless `join_touching`)."""
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1] if join_touching else s[1:] >= reach[:-1]
    return np.flatnonzero(new), reach


def union(starts: np.ndarray, ends: np.ndarray, *, keep_empty: bool = False
          ) -> tuple[np.ndarray, np.ndarray]:
    """The sorted, disjoint intervals covering the union of [starts, ends): overlapping
    and touching ones joined; empty ones dropped unless `keep_empty` (module docstring)."""
    if not keep_empty:
        keep = ends > starts
        starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    first, reach = _runs(s, e, join_touching=True)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def subtract(starts: np.ndarray, ends: np.ndarray, cut_starts: np.ndarray,
             cut_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """union(starts, ends) minus union(cut_starts, cut_ends): the parts no cut interval
    covers, sorted, disjoint, not touching. The union intersected with the gaps between
    the cut's intervals, each interval with the run of gaps it overlaps (found by binary
    search): no pair of an interval and a cut that cannot meet is looked at. A version
    that scanned every cut interval for each interval ran over 11 minutes on a 200 MB
    rank trace."""
    s, e = union(starts, ends)
    cs, ce = union(cut_starts, cut_ends)
    # The gaps [-inf, cs0), [ce0, cs1), ..., [ce_last, inf): sorted, and none empty,
    # since the union joined touching cut intervals.
    gs = np.concatenate(([-np.inf], ce))
    ge = np.concatenate((cs, [np.inf]))
    # gap j meets interval i when ge[j] > s[i] and gs[j] < e[i]: both arrays are sorted,
    # so the gaps of interval i are the run first[i] <= j < stop[i]
    first = np.searchsorted(ge, s, side="right")
    stop = np.searchsorted(gs, e, side="left")
    n = np.maximum(stop - first, 0)
    i = np.repeat(np.arange(len(s)), n)
    j = np.repeat(first - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
    # each piece is non-empty: an interval and a gap, both non-empty, that meet
    return np.maximum(s[i], gs[j]), np.minimum(e[i], ge[j])


def clip(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float
         ) -> tuple[np.ndarray, np.ndarray]:
    """The intervals that reach into [lo, hi), cut to it (not merged; one that is empty
    inside the window stays)."""
    keep = (ends > lo) & (starts < hi)
    return np.maximum(starts[keep], lo), np.minimum(ends[keep], hi)


def covered(starts: np.ndarray, ends: np.ndarray, ws: np.ndarray, we: np.ndarray
            ) -> np.ndarray:
    """Per interval [starts, ends), its length inside the windows [ws, we), which are
    sorted and disjoint (a union's result)."""
    out = np.zeros(len(starts))
    if not len(ws):
        return out
    cum = np.concatenate(([0.0], np.cumsum(we - ws)))

    def inside_before(t: np.ndarray) -> np.ndarray:  # window time before t
        k = np.searchsorted(ws, t, side="right") - 1
        kk = np.maximum(k, 0)
        part = np.clip(t - ws[kk], 0.0, we[kk] - ws[kk])
        return np.where(k >= 0, cum[kk] + part, 0.0)

    return np.maximum(0.0, inside_before(ends) - inside_before(starts))


def busy_us(starts_us: np.ndarray, durs_us: np.ndarray, ws_us: np.ndarray,
            we_us: np.ndarray) -> tuple[float, np.ndarray]:
    """(time inside the windows covered by at least one interval, each interval's time
    inside the windows); the windows sorted and disjoint. Timestamps ~5e12 us carry
    ~1e-3 us of float error, durations are exact as written: an interval wholly inside a
    window counts its duration, and an interval that overlaps no other counts alone, so
    busy time equals the summed kernel times to the last digit unless kernels really
    overlap."""
    ends_us = starts_us + durs_us
    inside = covered(starts_us, ends_us, ws_us, we_us)
    inside = np.where(inside >= durs_us - 1e-3, durs_us, inside)
    if not len(starts_us):
        return 0.0, inside
    o = np.argsort(starts_us, kind="stable")
    s, e = starts_us[o], ends_us[o]
    # touching is not overlapping here: two kernels back to back each count alone
    first, _ = _runs(s, e, join_touching=False)
    size = np.diff(np.append(first, len(s)))
    alone = np.repeat(size == 1, size)
    busy = float(inside[o][alone].sum())
    multi = np.flatnonzero(size > 1)
    if len(multi):
        g_end = np.maximum.reduceat(e, first)[multi]
        busy += float(covered(s[first][multi], g_end, ws_us, we_us).sum())
    return busy, inside


# --- lists of (start, end) tuples: dist/comm.py's RankTrace holds its intervals so ------


def as_arrays(intervals: Iterable[Interval]) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) as float arrays."""
    pairs = np.array(list(intervals), dtype=float).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def as_list(starts: np.ndarray, ends: np.ndarray) -> list[Interval]:
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def subtract_list(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """`subtract` on lists: union(a) minus union(b)."""
    return as_list(*subtract(*as_arrays(a), *as_arrays(b)))


def _length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Summed lengths of disjoint intervals, added in order (the same last digits as the
    list loops this module replaced; np.sum adds pairwise)."""
    return float(sum((ends - starts).tolist()))


def total_us(intervals: Iterable[Interval]) -> float:
    """Length of the union of the intervals."""
    return _length(*union(*as_arrays(intervals)))


def exposed_us(comm: Iterable[Interval], compute: Iterable[Interval]) -> float:
    """Time a communication interval runs while no compute interval does."""
    return _length(*subtract(*as_arrays(comm), *as_arrays(compute)))

"""Interval arithmetic (gobrrr.intervals): exact, hand-computed cases, and a seeded random
check of every function against the point-by-point definition on an integer grid."""

from __future__ import annotations

import random

import numpy as np

from gobrrr.intervals import (
    as_arrays,
    as_list,
    busy_us,
    clip,
    covered,
    exposed_us,
    subtract_list,
    total_us,
    union,
)


def arr(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=float)


def union_of(ivs):
    return as_list(*union(*as_arrays(ivs)))


# --- exact ------------------------------------------------------------------------------


def test_union_and_subtract_exact():
    # touching (5,7)+(7,8) join, (1,3) overlaps (0,2), the empty (9,9) goes
    assert union_of([(5, 7), (0, 2), (1, 3), (7, 8), (9, 9)]) == [(0, 3), (5, 8)]
    # comm [0,10) and [20,30); compute [2,4), [8,22), [25,26)
    # left: [0,2) [4,8) [22,25) [26,30) = 2 + 4 + 3 + 4 = 13
    comm, compute = [(0, 10), (20, 30)], [(2, 4), (8, 22), (25, 26)]
    assert subtract_list(comm, compute) == [(0, 2), (4, 8), (22, 25), (26, 30)]
    assert exposed_us(comm, compute) == 13
    assert exposed_us(comm, []) == 20  # nothing hides it
    assert exposed_us(comm, [(-5, 50)]) == 0  # all hidden


def test_union_keeps_empty_intervals_when_asked():
    # (2,2) touches [0,2) and joins it; (5,5) stands alone: kept as a point, or dropped
    s, e = arr(5, 0, 2), arr(5, 2, 2)
    ks, ke = union(s, e, keep_empty=True)
    assert ks.tolist() == [0, 5] and ke.tolist() == [2, 5]
    ds, de = union(s, e)
    assert ds.tolist() == [0] and de.tolist() == [2]
    assert [len(x) for x in union(arr(), arr())] == [0, 0]


def test_total_us_counts_overlaps_once():
    # [0,4) and [2,6) make [0,6): 6 + 1 = 7
    assert total_us([(0, 4), (2, 6), (10, 11)]) == 7
    assert total_us([]) == 0.0


def test_clip_cuts_to_the_window_without_merging():
    # window [4, 25): (0,5) -> (4,5); (8,12) whole; (20,30) -> (20,25); (3,3) and
    # (25,26) lie outside; (6,6) is empty inside the window and stays; order as given
    s, e = clip(arr(0, 8, 20, 3, 25, 6), arr(5, 12, 30, 3, 26, 6), 4, 25)
    assert as_list(s, e) == [(4, 5), (8, 12), (20, 25), (6, 6)]


def test_covered_per_interval():
    # windows [0,10) and [20,30): (5,25) has 5 + 5 = 10 inside; (10,20) none;
    # (-5,3) 3; (28,40) 2
    got = covered(arr(5, 10, -5, 28), arr(25, 20, 3, 40), arr(0, 20), arr(10, 30))
    assert got.tolist() == [10, 0, 3, 2]
    assert covered(arr(1), arr(2), arr(), arr()).tolist() == [0]


def test_busy_us_exact():
    # window [0,100); kernels [0,10), [10,20), [15,25), [40,45). [0,10) touches [10,20)
    # without overlapping: alone, 10. [10,20)+[15,25) overlap: their union 15. [40,45)
    # alone, 5. busy = 10 + 15 + 5 = 30; each kernel's time inside is its duration
    busy, inside = busy_us(arr(0, 10, 15, 40), arr(10, 10, 10, 5), arr(0), arr(100))
    assert busy == 30 and inside.tolist() == [10, 10, 10, 5]
    # half of [90,110) lies inside: 10 of it
    busy, inside = busy_us(arr(90), arr(20), arr(0), arr(100))
    assert busy == 10 and inside.tolist() == [10]


def test_busy_us_counts_durations_exactly_at_trace_timestamps():
    # At 5e12 us a double steps by ~1e-3 us: (5e12 + 0.3 + 1.7) - (5e12 + 0.3) is
    # 1.7001953125, not 1.7. A kernel wholly inside its window counts its duration as
    # written, so busy time is the summed durations to the last digit.
    t0 = 5e12
    s, d = arr(t0 + 0.3, t0 + 3.0), arr(1.7, 2.5)
    ws, we = arr(t0), arr(t0 + 10)
    assert covered(s, s + d, ws, we)[0] == 1.7001953125  # the error this rule removes
    busy, inside = busy_us(s, d, ws, we)
    assert inside.tolist() == [1.7, 2.5] and busy == 1.7 + 2.5


# --- against the definition ----------------------------------------------------------


def test_every_function_agrees_with_its_definition_on_random_intervals():
    # Point by point on an integer grid: t is in a set of intervals when one of them
    # covers [t, t+1). 300 seeded cases of up to 15 intervals, lengths 0 to 12.
    rng = random.Random(0)
    grid = range(-20, 240)

    def rand_ivs(n):
        return [(s, s + rng.randint(0, 12)) for s in (rng.randint(0, 200) for _ in range(n))]

    def points(ivs):
        return {t for t in grid if any(s <= t < e for s, e in ivs)}

    def points_of(s, e):
        return {t for a, b in zip(s.tolist(), e.tolist(), strict=True)
                for t in range(int(a), int(b))}

    def sorted_disjoint_apart(ivs):  # and none empty
        return all(s < e for s, e in ivs) and all(
            e0 < s1 for (_, e0), (s1, _) in zip(ivs, ivs[1:], strict=False))

    for _ in range(300):
        a, b = rand_ivs(rng.randint(0, 15)), rand_ivs(rng.randint(0, 15))
        sa, ea = as_arrays(a)
        sb, eb = as_arrays(b)
        u = as_list(*union(sa, ea))
        assert points_of(*union(sa, ea)) == points(a) and sorted_disjoint_apart(u), a
        got = subtract_list(a, b)
        assert points_of(*as_arrays(got)) == points(a) - points(b), (a, b)
        assert got == union_of(got) and sorted_disjoint_apart(got)
        assert exposed_us(a, b) == len(points(a) - points(b))
        assert total_us(a) == len(points(a))
        # covered and busy_us against the union of b as the windows
        ws, we = union(sb, eb)
        pb = points(b)
        want = [len(set(range(s, e)) & pb) for s, e in a]
        assert covered(sa, ea, ws, we).tolist() == want, (a, b)
        busy, inside = busy_us(sa, ea - sa, ws, we)
        assert busy == len(points(a) & pb) and inside.tolist() == want, (a, b)
        # the union of some rows clipped to a window, as dist/commread.py takes it
        lo, hi = sorted(rng.sample(range(-10, 230), 2))
        rows = np.array([rng.random() < 0.7 for _ in a], dtype=bool)
        cs, ce = clip(sa[rows], ea[rows], lo, hi)
        kept = [iv for iv, r in zip(a, rows, strict=True) if r]
        assert points_of(cs, ce) == {t for t in points(kept) if lo <= t < hi}
        assert sorted_disjoint_apart(as_list(*union(cs, ce)))
        assert points_of(*union(cs, ce)) == points_of(cs, ce)

"""The timer driven by a stub clock: exact call counts and exact statistics."""

import pytest

from gobrrr.timing import measure, summarize


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def make_fn(clock, durations):
    """A workload whose i-th call takes durations[i] seconds of fake time."""
    calls = []

    def fn():
        calls.append(1)
        clock.now += durations[min(len(calls) - 1, len(durations) - 1)]

    return fn, calls


def test_summarize_exact():
    # sorted: 1 2 3 4 5; inclusive quartiles: q1 = 2, q3 = 4 -> iqr 2
    assert summarize([5.0, 1.0, 3.0, 2.0, 4.0]) == (3.0, 2.0, 1.0, 5.0)
    assert summarize([7.0]) == (7.0, 0.0, 7.0, 7.0)
    with pytest.raises(ValueError):
        summarize([])


def test_steady_workload_stops_at_min_samples():
    clock = FakeClock()
    fn, calls = make_fn(clock, [0.5] + [0.001] * 100)  # slow first call, then 1 ms
    t = measure(fn, clock=clock, sync=lambda: None, warmup_calls=2, warmup_s=0.0,
                min_samples=5, min_sample_s=0.001)
    # 2 warm-up calls; estimate 1 ms (first call excluded) -> 1 call per sample;
    # the spread is 0 so it stops at min_samples = 5 samples: 2 + 5 = 7 calls.
    assert len(calls) == 7
    assert t.warmup_calls == 2
    assert t.calls_per_sample == 1
    assert t.n_samples == 5
    assert t.median_s == pytest.approx(0.001)
    assert t.iqr_s == pytest.approx(0.0)
    assert not t.noisy


def test_short_calls_are_batched_per_sample():
    clock = FakeClock()
    fn, calls = make_fn(clock, [1e-5])  # 10 us per call
    t = measure(fn, clock=clock, sync=lambda: None, warmup_calls=3, warmup_s=0.0,
                min_samples=4, min_sample_s=1e-3)
    # 1 ms per sample / 10 us per call = 100 calls per sample; 3 + 4*100 calls.
    assert t.calls_per_sample == 100
    assert len(calls) == 3 + 400
    assert t.median_s == pytest.approx(1e-5)


def test_noisy_workload_is_flagged_when_budget_runs_out():
    clock = FakeClock()
    pattern = [0.001, 0.003]  # alternating: median 2 ms, IQR 2 ms -> 100% spread
    calls = []

    def fn():
        clock.now += pattern[len(calls) % 2]
        calls.append(1)

    t = measure(fn, clock=clock, sync=lambda: None, warmup_calls=2, warmup_s=0.0,
                min_samples=5, max_samples=1000, budget_s=0.05, min_sample_s=1e-4)
    assert t.noisy
    assert t.rel_iqr > 0.05
    # stops once the 50 ms budget is spent: samples cost 1 or 3 ms, so ~25 samples.
    assert 15 <= t.n_samples <= 40


def test_max_samples_caps_the_loop():
    clock = FakeClock()
    pattern = [0.001, 0.003]
    calls = []

    def fn():
        clock.now += pattern[len(calls) % 2]
        calls.append(1)

    t = measure(fn, clock=clock, sync=lambda: None, warmup_calls=2, warmup_s=0.0,
                min_samples=3, max_samples=7, budget_s=100.0, min_sample_s=1e-4)
    assert t.n_samples == 7
    assert len(calls) == 2 + 7


def test_sync_brackets_every_sample():
    clock = FakeClock()
    fn, calls = make_fn(clock, [0.001])
    syncs = []
    measure(fn, clock=clock, sync=lambda: syncs.append(1), warmup_calls=2, warmup_s=0.0,
            min_samples=5, min_sample_s=0.001)
    # two syncs per warm-up call and per sample: 2 * (2 + 5)
    assert len(syncs) == 14


def test_real_clock_smoke():
    t = measure(lambda: sum(range(1000)), budget_s=0.2)
    assert t.median_s > 0 and t.n_samples >= 5


@pytest.mark.parametrize("warmup_calls", [1, 2, 3])
def test_a_call_longer_than_the_budget_is_made_three_times(warmup_calls):
    clock = FakeClock()
    fn, calls = make_fn(clock, [5.0])  # 5 s per call, a 0.1 s budget
    t = measure(fn, clock=clock, sync=lambda: None, budget_s=0.1,
                warmup_calls=warmup_calls)  # min_samples=5, warmup_s=0.05: the defaults
    # the first call (one-time costs), then two samples and no more: before, 2 warm-up
    # calls + min_samples 5 = 7 calls, 35 s for a 0.1 s budget
    assert len(calls) == 3
    assert t.n_samples == 2 and t.samples_s == (5.0, 5.0) and t.median_s == 5.0
    # with 2+ warm-up calls the second is a warm single call: it is the first sample
    assert t.warmup_calls == min(warmup_calls, 2)


def test_a_call_under_the_budget_stops_two_samples_after_it_is_spent():
    clock = FakeClock()
    fn, calls = make_fn(clock, [0.06])  # 60 ms per call, a 0.1 s budget
    t = measure(fn, clock=clock, sync=lambda: None, budget_s=0.1)
    # warm-up: 2 calls (the second counts: 60 ms of budget); one sample spends it, a
    # second makes the median: 4 calls (before: 2 + 5 = 7)
    assert len(calls) == 4 and t.warmup_calls == 2 and t.n_samples == 2
    assert t.median_s == pytest.approx(0.06)


def test_a_slow_first_call_is_outside_the_budget():
    clock = FakeClock()
    fn, calls = make_fn(clock, [10.0] + [0.002] * 100)  # compiling, then 2 ms calls
    t = measure(fn, clock=clock, sync=lambda: None, budget_s=0.1)
    # the first call's one-time cost spends nothing (a guard: the new rule must not cut
    # a compiled workload short): warm-up as usual, 5 steady samples of one call
    assert len(calls) == 7 and t.warmup_calls == 2 and t.n_samples == 5
    assert t.median_s == pytest.approx(0.002)


class PeerCoordinator:
    """Rank 0 of two ranks, its peer simulated: every shared value's peer value is
    `peer(value)`, and rank 0 decides (coordinator.py)."""

    rank, size = 0, 2

    def __init__(self, peer):
        self.peer = peer
        self.decided = []

    def share(self, obj, what):
        return [obj, self.peer(obj)]

    def decide(self, obj, what):
        self.decided.append(what)
        return obj


def test_under_a_coordinator_every_ranks_spread_must_be_small():
    from gobrrr.timing import measure_ranks

    clock = FakeClock()
    fn, calls = make_fn(clock, [0.001])  # rank 0 steady at 1 ms
    peer = {"n": 0}

    def noisy_peer(value):
        # the peer's samples alternate 1 ms and 3 ms (IQR 100% of its median); its
        # "budget spent" flag is ignored: rank 0's clock decides
        if isinstance(value, tuple):
            peer["n"] += 1
            return (0.001 if peer["n"] % 2 else 0.003, True)
        return value

    coord = PeerCoordinator(noisy_peer)
    mine, every = measure_ranks(fn, clock=clock, sync=lambda: None, warmup_calls=2,
                                warmup_s=0.0, min_samples=5, max_samples=12, budget_s=100.0,
                                min_sample_s=0.001, coordinator=coord)
    # rank 0 alone would stop at 5 samples (spread 0, test above); the peer's spread
    # keeps both going to max_samples: 2 warm-up calls + 12 samples of 1 call each
    assert len(calls) == 2 + 12 and mine.n_samples == every[1].n_samples == 12
    assert mine is every[0] and not mine.noisy and every[1].noisy
    assert every[1].median_s == pytest.approx(0.002)
    # the warm-up's end and the calls per sample were rank 0's decisions
    assert "agreeing on calls per sample" in coord.decided


def test_ab_time_under_a_coordinator_times_the_slowest_rank():
    from gobrrr.remedies.verify import ab_time

    now = [0.0]

    def cost(s):
        def f():
            now[0] += s
        return f

    # rank 0: 2 ms vs 1 ms per call; its peer takes 3x as long on every side: each
    # round's time per side is the slowest rank's, so 6 ms vs 3 ms, still 2x
    coord = PeerCoordinator(lambda v: 3 * v if isinstance(v, float) else v)
    got = ab_time(cost(2e-3), cost(1e-3), device="cpu", budget_s=0.0, min_rounds=9,
                  clock=lambda: now[0], coordinator=coord)
    assert got.speedup == pytest.approx(2.0) and got.rounds == 9
    assert got.eager_s == pytest.approx(6e-3) and got.candidate_s == pytest.approx(3e-3)
    # blocks sized from the slowest first call: 10 ms / 6 ms -> 2 calls of A
    assert got.calls_per_block == 2



def test_a_call_longer_than_the_budget_gets_two_samples_and_a_note_that_says_so():
    from gobrrr.timing import MIN_SAMPLES, few_samples_note

    clock = FakeClock()

    def fn():  # 3 s a call against a 2 s budget
        clock.now += 3.0

    t = measure(fn, clock=clock, sync=lambda: None, budget_s=2.0)
    assert t.n_samples == 2 and t.warmup_calls == 2
    # the first call is outside the budget; one warm call and 5 samples inside: 6 x 3 s
    assert few_samples_note(t, 2.0) == (
        "T_wall is the median of 2 samples, fewer than 5: a call takes 3 s and the time "
        "budget is 2 s; --time-budget 18 would give 5")
    t = measure(fn, clock=clock, sync=lambda: None, budget_s=18.5)
    assert t.n_samples == MIN_SAMPLES and few_samples_note(t, 18.5) is None

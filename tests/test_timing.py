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

"""A CPU whose load differed between the timed calls and the counted run (issue 25, item
2): T_wall and the op times were measured under different contention, so the verdict's
share ranges cover T_wall at the counted run's CPU too (contention.wall_factor)."""

import pytest

from gobrrr.contention import Contention, cpu_difference, wall_factor
from gobrrr.show.budget_view import verdict_headline
from gobrrr.verdict import share_ranges


def _c(other_cores, threads=2, cores=2):
    return Contention(cores=cores, threads=threads, wall_s=1.0, own_cores=0.5,
                      other_cores=other_cores)


def _budget(overhead_s, memory_s):
    from gobrrr.budget import Budget

    return Budget(wall_s=overhead_s + memory_s, busy_s=memory_s, overhead_s=overhead_s,
                  memory_s=memory_s, compute_s=0.0, floor_s=0.0, below_roof_s=0.0)


def test_the_factor_is_the_ratio_of_the_cores_torch_could_have():
    # timed: others held 1.7 of 2 cores -> 0.3 for torch's 2 threads; counted: 1.0 -> 1.0
    assert wall_factor(_c(1.7), _c(1.0)) == pytest.approx(0.3)
    # an idle machine in both: the threads' 2 cores each time; a blip of 0.2 cores: 1.11x
    assert wall_factor(_c(0.0), _c(0.0)) == pytest.approx(1.0)
    assert wall_factor(_c(0.0), _c(0.2)) == pytest.approx(2 / 1.8)
    # one thread wants one core: free cores beyond it do not matter
    assert wall_factor(_c(0.5, threads=1), _c(0.0, threads=1)) == pytest.approx(1.0)
    # never below a tenth of a core: the process ran
    assert wall_factor(_c(2.0), _c(0.0)) == pytest.approx(0.1 / 2)
    assert wall_factor(_c(None), _c(1.0)) is None and wall_factor(None, _c(1.0)) is None
    assert cpu_difference(_c(1.7), _c(1.0), 0.3) == (
        "the CPU differed between the timed calls and the counted run: 0.3 against 1.0 "
        "cores available to torch's 2 threads (other processes: 1.7 and 1.0 cores busy); "
        "with the counted run's CPU T_wall would be ~0.30x, and the shares' ranges cover "
        "that")


def test_the_ranges_cover_t_wall_at_the_counted_runs_cpu():
    b = _budget(0.4, 0.6)  # T = 1 s: overhead 40%, memory 60%; samples without spread
    tight = share_ranges(b, [1.0] * 5)
    assert tight["memory"] == pytest.approx((0.6, 0.6))
    # T_wall at the counted run's CPU 2x: T 2 s, memory 0.6 of 2 = 30%, overhead 70%
    r = share_ranges(b, [1.0] * 5, wall_factor=2.0)
    assert r["memory"] == pytest.approx((0.3, 0.6)) and r["overhead"] == pytest.approx((0.4, 0.7))
    # 0.5x: T would be 0.5 s, under the 0.6 s of memory: overhead 0, memory all of it
    r = share_ranges(b, [1.0] * 5, wall_factor=0.5)
    assert r["memory"] == pytest.approx((0.6, 1.0)) and r["overhead"] == pytest.approx((0.0, 0.4))


def test_a_verdict_the_cpu_difference_could_overturn_names_both():
    from gobrrr.counting import count
    from gobrrr.hardware import Ceilings
    from gobrrr.verdict import verdict_for

    ceil = Ceilings(device="cpu", fingerprint={"device": "cpu", "torch": "t", "python": "3",
                                               "name": "test"},
                    peak_flops_per_s={"fp32": 1e11}, bandwidth_bytes_per_s=1e10,
                    op_overhead_s=5e-6, python_ops_per_s=1e7, measured_at="t",
                    calibrate_s=0.0)
    counts = count(lambda: None)
    b = _budget(0.4, 0.6)
    sure = verdict_for(b, counts, ceil, "cpu", None, None, samples_s=[1.0] * 5)
    assert sure.regime == "memory" and not sure.uncertain and sure.wall_factor is None
    v = verdict_for(b, counts, ceil, "cpu", None, None, samples_s=[1.0] * 5, wall_factor=2.0)
    assert v.regime == "memory" and v.uncertain and v.wall_factor == 2.0
    assert v.share_range == pytest.approx((0.3, 0.6))
    assert v.runner_up == "overhead" and v.runner_up_range == pytest.approx((0.4, 0.7))
    assert verdict_headline(v.to_dict()) == (
        "MEMORY- OR OVERHEAD-BOUND: memory 30-60% vs overhead 40-70% (within this run's "
        "timing spread and its CPU load)")
    # a difference under WALL_FACTOR_SAID (1.25x) widens the ranges but is not named
    small = verdict_for(b, counts, ceil, "cpu", None, None, samples_s=[1.0] * 5,
                        wall_factor=1.15)
    assert small.wall_factor is None and not small.uncertain


def test_a_contended_cpu_run_is_never_confident():
    from gobrrr.counting import count
    from gobrrr.hardware import Ceilings
    from gobrrr.verdict import verdict_for

    ceil = Ceilings(device="cpu", fingerprint={"device": "cpu", "torch": "t", "python": "3",
                                               "name": "test"},
                    peak_flops_per_s={"fp32": 1e11}, bandwidth_bytes_per_s=1e10,
                    op_overhead_s=5e-6, python_ops_per_s=1e7, measured_at="t",
                    calibrate_s=0.0)
    b = _budget(0.2, 0.8)  # memory 80%: ranges far apart
    v = verdict_for(b, count(lambda: None), ceil, "cpu", None, None, samples_s=[1.0] * 5,
                    contended=True)
    assert v.regime == "memory" and v.uncertain and v.contended
    assert v.to_dict()["contended"] is True
    assert verdict_headline(v.to_dict()) == (
        "MEMORY- OR OVERHEAD-BOUND: memory 80% vs overhead 20% (on a contended CPU: other "
        "processes held cores torch's threads needed)")

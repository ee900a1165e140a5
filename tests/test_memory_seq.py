"""The sequence length that fits (memory_seq.py): the doubling, the quadratic through
three growing points, the positions' bound, the check and bad input, with exact numbers
on a fake step whose peak is max(optimizer step, activations)."""

import math

import pytest

from gobrrr.errors import UserError
from gobrrr.memory_seq import GROWTH, fit_seq_len
from test_memory import _profile

GB = 10**9


def _step(a=GB, b=10**6, c=100, flat=1.5 * GB, oom_above=None):
    """peak(L) = max(flat, a + b L + c L^2): the optimizer step's peak at short lengths,
    the activations' (with L x L scores) at long ones."""
    def measure(n):
        peak = max(flat, a + b * n + c * n * n)
        if oom_above is not None and peak > oom_above:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return _profile(int(peak))
    return measure


def _cap(cap):
    return lambda device, base: (cap, "given")


def _root(budget):
    """The largest L with 1e9 + 1e6 L + 100 L^2 <= budget."""
    return math.floor((-1e6 + math.sqrt(1e12 - 400 * (1e9 - budget))) / 200)


def test_doubling_past_the_flat_part_then_a_quadratic_through_three_growing_points():
    # 128, 256: the flat 1.5 GB; 512: 1.54 GB (grew 2.5%); 1024, 2048 grew: three
    # doublings in a row, stop; the quadratic through 512, 1024, 2048 is the step's own
    fit = fit_seq_len(_step(), 128, "cpu", capacity=_cap(20 * GB), check=False)
    assert fit.seq_lens == [128, 256, 512, 1024, 2048]
    assert fit.peaks_bytes[:2] == [1.5 * GB] * 2
    a, b, c = fit.coefficients
    assert (a, b, c) == (pytest.approx(1e9), pytest.approx(1e6), pytest.approx(100))
    assert fit.predicted_max_seq_len == _root(0.95 * 20 * GB) == 9317
    assert fit.limited_by == "memory" and fit.checked is None
    assert any("not checked by running it" in n for n in fit.notes)


def test_the_positions_bound_it_first_and_a_peak_that_never_grows():
    fit = fit_seq_len(_step(), 128, "cpu", max_positions=1024, capacity=_cap(20 * GB),
                      check=False)
    # 512 and 1024 grew (two doublings): the line through them passes 1024 within 19 GB
    assert fit.seq_lens == [128, 256, 512, 1024]
    assert fit.predicted_max_seq_len == 1024 and fit.limited_by == "positions"
    assert any("the line through the two longest" in n for n in fit.notes)
    flat = fit_seq_len(_step(flat=10 * GB), 64, "cpu", max_positions=1024,
                       capacity=_cap(20 * GB), check=False)
    assert flat.seq_lens == [64, 128, 256, 512, 1024]
    assert flat.predicted_max_seq_len == 1024 and flat.limited_by == "positions"
    assert any("did not grow" in n for n in flat.notes)


def test_the_prediction_is_checked_and_the_next_length_up_runs_out_of_memory():
    limit = GB + 10**6 * 8000 + 100 * 8000**2  # what the fake device holds: L = 8,000
    fit = fit_seq_len(_step(oom_above=limit), 128, "cuda",
                      capacity=_cap(int(limit / 0.95)), check=True)
    want = _root(0.95 * int(limit / 0.95))
    assert fit.predicted_max_seq_len == want and want in (7999, 8000)
    assert fit.checked["predicted"] == {"seq_len": want, "ran": True,
                                        "peak_bytes": GB + 10**6 * want + 100 * want**2}
    up = fit.checked["next_up"]
    assert up["seq_len"] == math.ceil(want * 1.1) and up["ran"] is False and up["oom"]


def test_a_length_that_runs_out_while_measuring_bounds_the_answer():
    # 512, 1024, 2048 grew twice; 4096 runs out of memory: the line would pass it
    fit = fit_seq_len(_step(flat=GB // 2, oom_above=GB + 10**6 * 3000 + 100 * 3000**2),
                      512, "cpu", capacity=_cap(100 * GB), check=False)
    assert fit.seq_lens == [512, 1024, 2048]
    assert fit.predicted_max_seq_len == 4095 and fit.limited_by == "memory"
    assert any("4096 ran out of memory" in n for n in fit.notes)


def test_bad_input_is_one_line():
    with pytest.raises(UserError, match="give at most 512"):
        fit_seq_len(_step(), 600, "cpu", max_positions=1024)
    assert GROWTH == 0.01


def test_the_command_refuses_a_target_without_a_sequence(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "gobrrr", "memory", "examples:mlp",
                        "--fit-seq-len", "--device", "cpu", "-q"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2
    assert "--fit-seq-len takes an hf: sequence model" in p.stderr

"""Failures diagnose survives are warnings (a note in the report and a progress line),
never silent: an experiment that raises, NaN/inf in the workload's output."""

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import gobrrr.experiments
import gobrrr.hardware
from gobrrr.api import diagnose_workload
from gobrrr.cli import cli
from gobrrr.hardware import Ceilings
from gobrrr.workload import Workload, from_callable

TARGETS = Path(__file__).parent / "data" / "targets.py"


@pytest.fixture(autouse=True)
def _fixed_ceilings(monkeypatch):
    # calibration takes seconds on this CPU and is not under test here
    ceil = Ceilings(device="cpu", fingerprint={"name": "test"},
                    peak_flops_per_s={"fp32": 1e11}, bandwidth_bytes_per_s=1e10,
                    op_overhead_s=3e-6, python_ops_per_s=1e7, measured_at="t",
                    calibrate_s=0.0)
    monkeypatch.setattr(gobrrr.hardware, "calibrate", lambda *a, **k: ceil)


def _diagnose(w):
    said = []
    report = diagnose_workload(w, time_budget_s=0.05, progress=said.append)
    return report, said


def _warnings(report, said):
    notes = [n for n in report.notes if n.startswith("warning: ")]
    lines = [s for s in said if s.startswith("warning: ")]
    return notes, lines


def _factory(batch_size=4):
    w = torch.randn(16, 16)

    def fn(x):
        if x.shape[0] > 4:
            raise TypeError("this step only takes batches up to 4\nsecond line")
        return x @ w

    return fn, (torch.randn(batch_size, 16),)


def test_a_2x_batch_that_raises_is_a_warning_with_its_first_line():
    fn, args = _factory()
    w = Workload("f", fn, args, batch_size=4, factory=_factory)
    report, said = _diagnose(w)
    notes, lines = _warnings(report, said)
    expected = ("warning: batch scaling at 2x failed: TypeError: this step only takes "
                "batches up to 4")
    assert notes == [expected] and lines == [expected]
    assert report.batch.reading.startswith("the 2x batch did not run: TypeError")


def test_counting_the_2x_batch_that_raises_is_a_warning_not_a_crash(monkeypatch):
    # the 2x batch is timed, then counting it raises: the diagnosis keeps the 1x budget
    def broken_count(*a, **k):
        raise ValueError("counting broke")

    monkeypatch.setattr(gobrrr.experiments, "count", broken_count)
    x = torch.randn(8, 16)
    report, said = _diagnose(from_callable(lambda a: a.cos(), (x,)))
    expected = [f"warning: batch scaling at {k}x failed: ValueError: counting broke"
                for k in (2, 4)]  # 2x took under 50 ms, so 4x ran too
    assert _warnings(report, said) == (expected, expected)
    assert report.batch.reading == ("the 2x batch ran but could not be counted: "
                                    "ValueError: counting broke")
    assert report.batch.time_ratio is None and report.budget.wall_s > 0


def test_scaling_the_inputs_that_raises_is_a_warning_not_a_crash(monkeypatch):
    # torch.cat of the inputs running out of memory raised past batch_times before
    def no_memory(self, factor):
        raise RuntimeError("out of memory repeating the inputs")

    monkeypatch.setattr(Workload, "scaled", no_memory)
    report, said = _diagnose(from_callable(lambda a: a.cos(), (torch.randn(8, 16),)))
    expected = ("warning: batch scaling at 2x failed: RuntimeError: out of memory "
                "repeating the inputs")
    assert _warnings(report, said) == ([expected], [expected])


def test_an_experiment_that_raises_outside_what_it_records_is_a_warning(monkeypatch):
    def bug(*a, **k):
        raise KeyError("a bug in the experiment")

    monkeypatch.setattr(gobrrr.experiments, "batch_times", bug)
    report, said = _diagnose(from_callable(lambda a: a.cos(), (torch.randn(8, 16),)))
    expected = "warning: the batch-scaling experiment failed: KeyError: 'a bug in the experiment'"
    assert _warnings(report, said) == ([expected], [expected])
    assert report.batch is None


def test_nan_in_the_output_is_a_warning_checked_once(monkeypatch):
    import gobrrr.finite

    checked = []
    real = gobrrr.finite.nonfinite_summary
    monkeypatch.setattr(gobrrr.finite, "nonfinite_summary",
                        lambda out: checked.append(1) or real(out))
    x = torch.tensor([[0.0, 1.0, -1.0, 2.0]])
    report, said = _diagnose(from_callable(lambda a: a / 0.0, (x,)))  # 0/0 NaN, x/0 inf
    assert len(checked) == 1  # one call's output, however many calls were timed
    expected = ("warning: the workload's output contains NaN/inf: output: 1 NaN, 3 inf "
                "of 4 (float32 [1, 4])")
    assert _warnings(report, said) == ([expected], [expected])


def test_a_finite_output_gives_no_warning():
    report, said = _diagnose(from_callable(lambda a: a.cos(), (torch.randn(8, 16),)))
    assert _warnings(report, said) == ([], [])


def test_doctor_prints_the_nan_warning_on_stderr_even_when_quiet():
    r = CliRunner().invoke(cli, ["doctor", f"{TARGETS}:nan_output", "-q", "--json",
                                 "--no-experiments", "--time-budget", "0.05",
                                 "--device", "cpu"])
    assert r.exit_code == 0, r.output
    warned = [x for x in r.stderr.splitlines() if x.startswith("gobrrr: warning:")]
    assert warned == ["gobrrr: warning: the workload's output contains NaN/inf: output: "
                      "64 NaN, 0 inf of 64 (float32 [4, 16])"], r.stderr


def test_an_output_that_cannot_be_checked_is_a_warning(monkeypatch):
    import gobrrr.finite

    def unsupported(out):
        raise RuntimeError("isfinite is not supported for this layout")

    monkeypatch.setattr(gobrrr.finite, "nonfinite_summary", unsupported)
    report, said = _diagnose(from_callable(lambda a: a.cos(), (torch.randn(8, 16),)))
    expected = ("warning: could not check the output for NaN/inf: RuntimeError: isfinite "
                "is not supported for this layout")
    assert _warnings(report, said) == ([expected], [expected])

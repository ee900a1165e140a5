"""`gobrrr analyze --step-ms`: the step's time measured without the profiler is T_wall,
the trace's kernels keep their times (tracefile/given_step.py).

The trace: ((x * 2).sin() + 1).relu() over 2^24 fp32 under torch.compile (one Triton
kernel), recorded on the H200 on 2026-12-04 by benchmarks/plain_traces_gpu.py's record()
(a profile() block around 4 calls, no schedule; session s, plain2/pointwise-default).
There doctor read memory .145 / .855 of 0.039 ms, the user's loop timed 0.0354 ms a call,
and the traced calls took 0.135 ms: the profiler's host cost in a compiled call.
"""

from pathlib import Path

import pytest
from click.testing import CliRunner

from gobrrr.analyze import analyze
from gobrrr.cli import cli
from gobrrr.errors import UserError
from gobrrr.schema import validate
from gobrrr.tracefile.analysis import PROFILED_WALL_NOTE
from gobrrr.tracefile.steps import MEDIAN_WALL_NOTE

DATA = Path(__file__).parent / "data" / "traces"
COMPILED = DATA / "plain_pointwise_compiled.json.gz"
USER_STEP_S = 35.4e-6  # the plain loop's time a call, unprofiled, on that H200


def _given_notes(report):
    return [n for n in report.notes if "as given (--step-ms" in n]


def test_the_given_step_is_t_wall_and_overhead_is_the_rest(h200_calibration):
    traced = analyze([COMPILED])
    assert traced.regime == "overhead"  # the profiler's host cost read as overhead
    assert traced.budget.wall_s == pytest.approx(135.27e-6, rel=1e-3)
    assert PROFILED_WALL_NOTE in traced.notes
    given = analyze([COMPILED], step_s=USER_STEP_S)
    b = given.budget
    # the kernels are the trace's: the same busy time, only T_wall moved
    assert b.busy_s == pytest.approx(traced.budget.busy_s)
    assert b.busy_s == pytest.approx(33.429e-6, rel=1e-3)
    assert b.wall_s == USER_STEP_S
    assert b.overhead_s == pytest.approx(USER_STEP_S - b.busy_s)
    assert given.regime == "memory"  # doctor's regime on that H200
    assert given.fractions["memory"] == pytest.approx(b.busy_s / USER_STEP_S)
    # the notes on the traced span give way to one on the given step
    assert PROFILED_WALL_NOTE not in given.notes
    assert not [n for n in given.notes if n.startswith(MEDIAN_WALL_NOTE)]
    (note,) = _given_notes(given)
    assert "the trace's steps took 0.1353 ms (3.82x" in note
    validate(given.to_dict(), "report")
    trace = given.to_dict()["workload"]["trace"]
    assert trace["step_given_s"] == USER_STEP_S
    assert trace["traced_step_s"] == pytest.approx(traced.budget.wall_s)
    (cost,) = [c for c in trace["check"] if c["item"] == "profiler cost"]
    assert "the traced steps took 135 us, 3.82x the 35.4 us given" in cost["detail"]
    assert given.to_dict()["timing"]["median_s"] == USER_STEP_S


def test_an_overhead_verdict_from_the_traced_span_says_it_is_an_upper_bound(
        h200_calibration):
    """Without --step-ms the compiled chain reads overhead-bound as traced: the verdict
    is marked (verdict.as_traced), its headline says "as traced (an upper bound)" and
    its first evidence names what the kernels alone are bound by; with the user's step
    neither (the verdict is doctor's memory)."""
    from gobrrr.show.budget_view import verdict_headline

    traced = analyze([COMPILED])
    v = traced.to_dict()["verdict"]
    assert v["as_traced"] is True
    assert verdict_headline(v).startswith("OVERHEAD-BOUND as traced (an upper bound): ")
    assert v["evidence"][0].startswith("as traced: T_wall is the profiled steps' span")
    assert "the ops' time alone is memory-bound (33.4 us of 33.4 us)" in v["evidence"][0]
    validate(traced.to_dict(), "report")
    given = analyze([COMPILED], step_s=USER_STEP_S).to_dict()["verdict"]
    assert given["as_traced"] is False and given["regime"] == "memory"
    assert not verdict_headline(given).count("as traced")
    assert not given["evidence"][0].startswith("as traced")


def test_a_step_shorter_than_its_kernels_is_refused(h200_calibration):
    # kernels take their traced time unprofiled: 20 us cannot hold 33.4 us of them
    with pytest.raises(UserError, match=r"--step-ms 0\.02 is shorter than the 0\.03343 "
                                        r"ms of device work per step"):
        analyze([COMPILED], step_s=20e-6)
    # within 10% of the busy time it is noise between two runs: accepted, scaled
    r = analyze([COMPILED], step_s=31e-6)
    assert r.budget.wall_s == 31e-6 and r.budget.overhead_s == 0


def test_a_step_longer_than_the_traced_ones_is_overhead_said(h200_calibration):
    r = analyze([COMPILED], step_s=200e-6)
    assert r.regime == "overhead"
    assert r.budget.overhead_s == pytest.approx(200e-6 - r.budget.busy_s)
    assert any(n.startswith("the given step (0.2 ms) is longer than the traced steps "
                            "(0.1353 ms)") for n in r.notes)


def test_cli_step_ms(h200_calibration):
    run = CliRunner().invoke(cli, ["analyze", str(COMPILED), "--step-ms", "0.0354",
                                   "--json", "-q"])
    assert run.exit_code == 0, run.output
    assert '"regime": "memory"' in run.output
    # the terminal says where T_wall came from
    run = CliRunner().invoke(cli, ["analyze", str(COMPILED), "--step-ms", "0.0354", "-q"])
    assert run.exit_code == 0, run.output
    assert "MEMORY-BOUND: 94% of 35.4 us per step" in run.output
    assert ("T_wall: 35.4 us per step as given (--step-ms); the trace's 3 profiled steps "
            "took 135 us") in " ".join(run.output.split())
    for bad in ("0", "-1", "fast", "nan", "inf"):
        run = CliRunner().invoke(cli, ["analyze", str(COMPILED), "--step-ms", bad, "-q"])
        assert run.exit_code == 2 and "--step-ms" in run.output
    run = CliRunner().invoke(cli, ["analyze", str(COMPILED), "--step-ms", "0.02", "-q"])
    assert run.exit_code == 2  # a UserError: one line
    assert "is shorter than the 0.03343 ms of device work" in run.output

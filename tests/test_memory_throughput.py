"""`gobrrr memory --fit --throughput` (gobrrr/memory_throughput.py): the ladder's batches,
the knee and the gain from given times (exact arithmetic below), a rung that runs out of
memory ending the ladder, a real short ladder on CPU, the child process, the CLI's line
for a bad combination and the terminal's lines."""

import json

import pytest
import torch
from click.testing import CliRunner

from gobrrr.cli import cli
from gobrrr.memory_fit import ChildFailed, MemoryFit
from gobrrr.memory_throughput import (
    KNEE_GAIN,
    Rung,
    knee_batch,
    ladder_batches,
    throughput_ladder,
    time_in_child,
)
from gobrrr.workload import Workload


def _fit(predicted, checked=None):
    return MemoryFit([4, 8], [0, 0], 0.0, 1.0, {}, 10**9, "given", predicted, checked)


def _workload(batch):
    def factory(b):
        return (lambda x: x), (torch.zeros(b, 4),)

    return Workload("t", lambda x: x, (torch.zeros(batch, 4),), {}, "cpu", batch, factory)


def _timer(step_s, oom_at=None):
    """A stub of the per-batch timer: the given median per batch (no clock)."""
    asked = []

    def run(batch):
        asked.append(batch)
        if oom_at is not None and batch >= oom_at:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch, {"median_s": step_s[batch], "rel_iqr": 0.01, "n_samples": 5,
                       "noisy": False}

    return run, asked


# an overhead-bound step at small batches (time nearly flat), bound from 32 on
STEP_S = {4: 0.010, 8: 0.0105, 16: 0.012, 32: 0.020, 64: 0.038, 128: 0.076, 151: 0.090}


def test_the_ladder_doubles_from_todays_batch_up_to_the_batch_that_fits():
    assert ladder_batches(4, 151) == [4, 8, 16, 32, 64, 128, 151]
    assert ladder_batches(4, 128) == [4, 8, 16, 32, 64, 128]  # the top is a doubling
    assert ladder_batches(4, 20, max_rungs=4) == [4, 8, 16, 20]
    assert ladder_batches(32, 11_216_430, max_rungs=4) == [32, 64, 128, 256]  # CPU
    assert ladder_batches(32, None, max_rungs=4) == [32, 64, 128, 256]
    assert ladder_batches(8, 8) == [8] and ladder_batches(8, 5) == [8]
    assert ladder_batches(8, None) == [8]


def test_the_knee_is_the_first_doubling_that_buys_under_10_percent():
    rungs = [Rung(b, t, b / t) for b, t in STEP_S.items()]
    # samples/s: 400, 761.9, 1333.3, 1600, 1684.2, 1684.2, 1677.8; doublings' gains:
    # 1.905, 1.75, 1.2, then 64 over 32: (64/0.038)/(32/0.020) = 1.0526 < 1.1
    assert knee_batch(rungs) == 32
    assert knee_batch(rungs, gain=1.05) == 64  # 1.0526 >= 1.05; 128 over 64: exactly 1.0
    # 151 is no doubling of 128: never read for the knee, even when it buys nothing
    flat_top = [Rung(64, 0.01, 6400.0), Rung(128, 0.01, 12800.0), Rung(151, 1.0, 151.0)]
    assert knee_batch(flat_top) is None
    # a rung that did not run is no doubling either
    assert knee_batch([Rung(4, 0.01, 400.0), Rung(8, None, None, error="OOM")]) is None
    assert KNEE_GAIN == 1.1


def test_the_gain_at_the_batch_that_fits_and_the_knee_from_given_times():
    timer, asked = _timer(STEP_S)
    said = []
    tp = throughput_ladder(_workload(4), _fit(151), timer=timer, max_rungs=10,
                           progress=said.append)
    assert asked == [4, 8, 16, 32, 64, 128, 151]
    assert [r.samples_per_s for r in tp.rungs] == [b / t for b, t in STEP_S.items()]
    # (151 / 0.090) / (4 / 0.010) = 1.51 / 0.36 = 4.19444...
    assert tp.gain_at_fit == pytest.approx(1.51 / 0.36, rel=1e-12)
    assert tp.gain_at_largest_timed == tp.gain_at_fit and tp.largest_timed_batch == 151
    assert tp.knee_batch == 32 and tp.doublings_timed == 5
    assert tp.fit_batch == 151 and tp.fit_source == "predicted"
    assert "throughput: batch 151 (7 of 7, this process)" in said
    assert "throughput: batch 32: 20 ms per step, 1.6 k samples/s" in said


def test_out_of_memory_at_a_rung_ends_the_ladder_and_is_said():
    timer, asked = _timer(STEP_S, oom_at=128)
    tp = throughput_ladder(_workload(4), _fit(151), timer=timer, max_rungs=10)
    assert asked == [4, 8, 16, 32, 64, 128]  # 151 never tried
    last = tp.rungs[-1]
    assert last.batch == 128 and last.oom and last.step_s is None
    assert last.error == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert "the ladder stopped at batch 128: out of memory" in tp.notes
    assert tp.gain_at_fit is None  # the batch that fits was not timed
    # (64 / 0.038) / (4 / 0.010) = 0.64 / 0.152 = 4.2105...
    assert tp.largest_timed_batch == 64
    assert tp.gain_at_largest_timed == pytest.approx(0.64 / 0.152, rel=1e-12)
    assert tp.to_dict()["rungs"][-1]["oom"] is True


def test_the_top_is_the_largest_that_ran_when_the_predicted_ran_out_of_memory():
    checked = {"predicted": {"batch": 165, "ran": False, "oom": True},
               "largest_ran": {"batch": 152, "runs": 6, "between": [152, 155]}}
    timer, asked = _timer({4: 0.01, 8: 0.02, 16: 0.04, 32: 0.08, 64: 0.16, 128: 0.32,
                           152: 0.38})
    tp = throughput_ladder(_workload(4), _fit(165, checked), timer=timer, max_rungs=10)
    assert asked == [4, 8, 16, 32, 64, 128, 152]
    assert tp.fit_batch == 152 and tp.fit_source == "largest that ran"
    # time proportional to the batch from the start: bound at once, samples/s flat
    assert tp.knee_batch == 4 and tp.gain_at_fit == pytest.approx(1.0)


def test_a_short_ladder_on_a_real_cpu_step(monkeypatch):
    from gobrrr import memory_throughput

    monkeypatch.setattr(memory_throughput, "TIME_BUDGET_S", 0.2)  # seconds, not minutes
    r = CliRunner().invoke(cli, ["memory", "examples:mlp_train", "--batch-size", "4",
                                 "--fit", "--throughput", "--json", "-q"])
    assert r.exit_code == 0, r.output
    tp = json.loads(r.stdout)["fit"]["throughput"]
    assert [g["batch"] for g in tp["rungs"]] == [4, 8, 16, 32]  # CPU: 4 rungs
    for g in tp["rungs"]:
        # the JSON keeps 6 significant digits
        assert g["samples_per_s"] > 0
        assert g["samples_per_s"] == pytest.approx(g["batch"] / g["step_s"], rel=1e-5)
        assert g["error"] is None and g["n_samples"] >= 2
    assert tp["where"] == "this process" and tp["fit_source"] == "predicted"
    assert tp["fit_batch"] > 32 and tp["gain_at_fit"] is None  # out of the CPU's reach
    assert tp["largest_timed_batch"] == 32 and tp["gain_at_largest_timed"] > 0
    assert tp["doublings_timed"] == 3 and tp["knee_gain"] == 1.1
    assert any("memory is not the limit on a CPU" in n for n in tp["notes"])
    _validate_memory_fit(json.loads(r.stdout)["fit"])


def _validate_memory_fit(fit):
    """The report schema's memory section's `fit` (throughput included)."""
    import jsonschema

    from gobrrr.schema import load_schema

    root = load_schema("report")
    part = root["properties"]["memory"]["properties"]["fit"] | {"$defs": root["$defs"]}
    jsonschema.Draft202012Validator(part).validate(fit)


def test_a_batch_is_timed_in_a_fresh_process():
    # what the ladder runs per batch on CUDA (here on CPU): the target built at the
    # batch and timed by gobrrr's timer in a child
    spec = {"target": "examples:mlp_train", "device": "cpu", "batch_size": 8,
            "options": None, "budget_s": 0.1}
    t = time_in_child(spec)
    assert t["median_s"] > 0 and t["n_samples"] >= 2
    with pytest.raises(ChildFailed, match="no_such"):
        time_in_child(dict(spec, target="examples:no_such"))


def test_throughput_without_fit_is_refused_in_one_line():
    r = CliRunner().invoke(cli, ["memory", "examples:mlp_train", "--throughput", "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--throughput climbs to the batch that fits: give it with --fit" in r.output


def test_terminal_says_the_gain_and_the_knee():
    from gobrrr.show.terminal import console, print_throughput

    timer, _ = _timer(STEP_S)
    tp = throughput_ladder(_workload(4), _fit(151), timer=timer, max_rungs=10).to_dict()
    out = console()
    with out.capture() as cap:
        print_throughput(out, tp)
    text = " ".join(cap.get().split())
    assert "batch 151 (the batch that fits, predicted) runs 4.19x the samples/s of batch 4" \
        in text
    assert "from batch 32 a doubling buys under 10% more samples/s" in text
    assert "20 ms" in text and "1.6 k" in text

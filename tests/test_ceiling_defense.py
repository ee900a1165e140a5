"""Ceilings that defend themselves (ceiling_defense.py): an op above a roof has the roof
re-measured, the better value kept (in the cache too), and a note says so."""

import dataclasses

import pytest
import torch

from gobrrr import ceiling_defense, hardware
from gobrrr.budget import compute_budget
from gobrrr.counting import count
from gobrrr.run import ProfiledRun


def _one_matmul_budget(ceil, time_s):
    # one fp32 matmul, 2 x 256^3 FLOPs, timed at time_s: its floor is flops / peak
    a = torch.randn(256, 256)
    counted = count(torch.mm, a, a)
    i = next(r.index for r in counted.records if r.op_class == "matmul")
    run = ProfiledRun(counts=counted, device="cpu", op_time_s={i: time_s})
    run.busy_s = time_s
    return compute_budget(run, time_s, ceil), counted.records


def _ceilings(fp32):
    return hardware.Ceilings(
        device="cpu", fingerprint=hardware.fingerprint("cpu"),
        peak_flops_per_s={"fp32": fp32}, bandwidth_bytes_per_s=2e10, op_overhead_s=2e-6,
        python_ops_per_s=5e7, measured_at="2026-12-01T00:00:00+00:00", calibrate_s=12.0,
        details={"matmul_n": 256, "llc_bytes": 2**25}, compiled_call_s=2e-5,
        compiled_tensor_s=1e-6)


def test_an_op_above_the_peak_names_the_roof_it_beat():
    ceil = _ceilings(1e9)
    # 2 x 256^3 = 33.6 MFLOPs in 16.8 ms would be 2 GFLOP/s: twice the 1 GFLOP/s peak
    budget, records = _one_matmul_budget(ceil, 2 * 256**3 / 2e9)
    beaten = ceiling_defense.beaten_roofs(budget, records, ceil)
    assert list(beaten) == ["fp32"]
    assert beaten["fp32"][0] == "aten::mm" and beaten["fp32"][1] == pytest.approx(2.0)
    # at 1.05x the peak: within the noise margin, nothing beaten
    budget, records = _one_matmul_budget(ceil, 2 * 256**3 / 1.05e9)
    assert ceiling_defense.beaten_roofs(budget, records, ceil) == {}


def test_the_beaten_roof_is_re_measured_kept_and_cached(monkeypatch):
    monkeypatch.setattr(ceiling_defense, "_DONE", set())
    calls = []

    def probe(device, dtype, n, budget_s):
        calls.append((device, dtype, n))
        return 5e9  # what the re-measure reads: the first calibration read low

    monkeypatch.setattr(hardware, "_matmul_flops_per_s", probe)
    ceil = _ceilings(1e9)
    budget, records = _one_matmul_budget(ceil, 2 * 256**3 / 2e9)
    new, notes = ceiling_defense.defend(budget, records, ceil)
    assert calls == [("cpu", "fp32", 256)]
    assert new.peak_flops_per_s["fp32"] == 5e9
    assert new.details["remeasured"]["fp32"]["before"] == 1e9
    assert len(notes) == 1 and "200% of the measured fp32 roof" in notes[0]
    assert "re-measured, 5 GFLOP/s" in notes[0]
    assert hardware.calibrate("cpu").peak_flops_per_s["fp32"] == 5e9  # the cache keeps it
    # once per process: a second beaten budget re-measures nothing, and says why
    again, notes = ceiling_defense.defend(budget, records, ceil)
    assert again is ceil and len(calls) == 1 and "re-measured before and held" in notes[0]


def test_a_roof_that_holds_is_said_and_ceilings_not_measured_here_are_left(monkeypatch):
    monkeypatch.setattr(ceiling_defense, "_DONE", set())
    monkeypatch.setattr(hardware, "_matmul_flops_per_s", lambda *a, **k: 0.9e9)
    ceil = _ceilings(1e9)
    budget, records = _one_matmul_budget(ceil, 2 * 256**3 / 2e9)
    new, notes = ceiling_defense.defend(budget, records, ceil)
    assert new.peak_flops_per_s["fp32"] == 1e9  # the better of the two
    assert "it held" in notes[0] and "likelier cause" in notes[0]
    for made in (dataclasses.replace(ceil, calibrate_s=0.0),
                 dataclasses.replace(ceil, source="datasheet")):
        assert ceiling_defense.defend(budget, records, made) == (made, [])


def test_a_calibration_taken_under_load_says_so_when_read_back():
    ceil = _ceilings(1e9)
    ceil.details["load"] = {"cores": 2, "threads": 2, "other_cores": 1.6,
                            "contended": True}
    hardware._save_cache(hardware._cache_path(ceil.fingerprint), ceil, [])
    notes = hardware.calibrate("cpu").notes
    assert any("kept 1.6 of 2 cores busy" in n and "calibrate --force" in n for n in notes)
    ceil.details["load"]["contended"] = False
    hardware._save_cache(hardware._cache_path(ceil.fingerprint), ceil, [])
    assert not any("cores busy" in n for n in hardware.calibrate("cpu").notes)

"""Ops below their roof (budget.classify, budget.likely_cause): instruction-bound
element-wise math, the 25-50% flag and its causes, exact on hand-made runs and ceilings;
the same rule on a trace (gobrrr analyze); the SDPA remedy credited with the softmax's
instruction time; the renderers show it."""

import json

import pytest
import torch

from gobrrr.budget import classify, compute_budget, likely_cause
from gobrrr.counting import count
from gobrrr.hardware import Ceilings
from gobrrr.run import Kernel, ProfiledRun
from gobrrr.verdict import remedies_for, verdict_for

US = 1e-6


def ceilings(**kw):
    # fp32 1 TFLOP/s, bf16 10 TFLOP/s; 10 GB/s; 5 us per tiny op; softmax bf16 1 G elem/s,
    # exp fp32 1.25 G elem/s (= 10 GB/s at 8 B per element: a probe that met the bandwidth)
    d = dict(device="cuda", fingerprint={"device": "cuda", "torch": "t", "python": "3",
                                         "name": "test"},
             peak_flops_per_s={"fp32": 1e12, "bf16": 1e13}, bandwidth_bytes_per_s=1e10,
             op_overhead_s=5 * US, python_ops_per_s=1e7, measured_at="t", calibrate_s=0.0,
             softmax_elems_per_s={"bf16": 1e9}, exp_elems_per_s={"fp32": 1.25e9, "bf16": 4e9})
    d.update(kw)
    return Ceilings(**d)


def run_of(fn, times_s, kernels_per_op=1):
    """A CUDA run of fn's counted ops with the given device time per op."""
    counts = count(fn)
    kernels = [Kernel(f"k{i}_{j}", t / kernels_per_op, i)
               for i, t in enumerate(times_s) for j in range(kernels_per_op)]
    run = ProfiledRun(counts=counts, device="cuda", op_time_s={}, kernels=kernels)
    run.tally_kernels()
    return run


def softmax_bf16():
    x = torch.randn(64, 1024, dtype=torch.bfloat16)
    return lambda: torch.softmax(x, -1)  # 65536 elements: 131072 B read + 131072 written


def test_softmax_whose_math_explains_its_time_is_instruction_bound():
    run = run_of(softmax_bf16(), [80 * US])
    (rec,) = run.counts.records
    assert (rec.op, rec.flops, rec.bytes) == ("aten::_softmax", 5 * 65536, 262144)
    ob = classify(rec, 80 * US, ceilings())
    # math floor: 65536 elem / 1e9 elem/s = 65.536 us = 82% of 80 us (>= 60%);
    # bytes floor: 262144 B / 1e10 B/s = 26.2144 us = 33% of 80 us (< 50%)
    assert ob.regime == "compute" and ob.limit == "instruction"
    assert ob.math_floor_s == pytest.approx(65.536 * US)
    assert ob.bytes_floor_s == pytest.approx(26.2144 * US)
    assert ob.reason == ("softmax bf16: 65.5 k elem at 1 Gelem/s calibrated = 65.5 us of "
                         "80 us; bytes alone need 26.2 us (33% of its time at the measured "
                         "bandwidth)")
    b = compute_budget(run, 100 * US, ceilings())
    assert b.compute_s == pytest.approx(80 * US) and b.memory_s == 0.0
    assert b.compute_s_by_unit == {"instruction": pytest.approx(80 * US)}
    (call,) = b.per_call
    # roofline fraction 26.2144 / 80 = 32.8%: above the 25% line, flagged 25-50%
    assert call.roofline_fraction == pytest.approx(0.32768)
    assert call.roof_band == "25-50%" and b.low_roof_s == pytest.approx(80 * US)
    assert b.below_roof_s == 0.0
    assert call.cause == ("instruction-bound element-wise math: its calibrated math floor "
                          "is 82% of its time (the reason says how)")
    (row,) = b.per_op
    assert row.limit == "instruction" and row.instruction_s == pytest.approx(80 * US)
    assert row.reason == ob.reason and row.cause == call.cause
    assert not row.below_roof and row.to_dict()["roof_band"] == "25-50%"
    assert [k.regime for k in b.kernels] == ["compute"]
    assert b.notes == []


def test_same_softmax_whose_bytes_explain_its_time_is_memory():
    # 40 us: bytes floor 26.2 us = 66% of it (>= 50%): the roofline's answer stands
    run = run_of(softmax_bf16(), [40 * US])
    b = compute_budget(run, 40 * US, ceilings())
    (call,) = b.per_call
    assert call.regime == "memory" and call.limit == "bytes" and call.reason is None
    assert call.math_floor_s == pytest.approx(65.536 * US)  # kept, for the record
    assert call.roof_band is None and call.cause is None
    assert b.memory_s == pytest.approx(40 * US) and b.compute_s_by_unit == {}


def test_math_floor_under_sixty_percent_is_not_enough():
    # softmax rate 2 G elem/s: math floor 32.768 us = 41% of 80 us; bytes 33%: memory,
    # flagged 25-50% with the partial math as its cause
    run = run_of(softmax_bf16(), [80 * US])
    b = compute_budget(run, 80 * US, ceilings(softmax_elems_per_s={"bf16": 2e9}))
    (call,) = b.per_call
    assert call.regime == "memory" and call.limit == "bytes"
    assert call.roof_band == "25-50%"
    assert call.cause == ("element-wise math: its calibrated floor 32.8 us is 41% of its "
                          "time, above its roofline floor 26.2 us")


def test_a_probe_that_met_the_bandwidth_never_makes_an_op_instruction_bound():
    # exp fp32 calibrated at 1.25 G elem/s = 10 GB/s = the bandwidth: its math floor equals
    # the bytes floor, 65536 x 8 B / 1e10 = 52.4288 us. At 120 us both are 44% of the time:
    # under 60%, so memory, flagged 25-50%; the math floor does not exceed the roofline
    # floor, and the kernel is not small: the cause is unknown.
    x = torch.randn(65536)
    run = run_of(lambda: x.exp(), [120 * US])
    b = compute_budget(run, 120 * US, ceilings())
    (call,) = b.per_call
    assert call.math_floor_s == pytest.approx(call.floor_s) == pytest.approx(52.4288 * US)
    assert call.regime == "memory" and call.limit == "bytes"
    assert call.roof_band == "25-50%" and call.cause == "unknown"


def test_uncalibrated_dtype_is_said_not_silently_memory():
    run = run_of(softmax_bf16(), [80 * US])
    b = compute_budget(run, 80 * US, ceilings(softmax_elems_per_s={}))
    assert b.per_call[0].limit == "bytes" and b.per_call[0].math_floor_s == 0.0
    assert b.notes == ["no calibrated element-wise rate for softmax bf16 (80 us) in these "
                       "ceilings (measured): those ops were not checked for an instruction "
                       "bound"]


def test_causes_of_ops_at_25_to_50_percent_of_their_roof():
    a, w = torch.randn(256, 256), torch.randn(256, 256)
    # mm: 2*256^3 = 33.5 MFLOP / 1e12 = 33.6 us vs 3 x 256 KiB / 1e10 = 78.6 us: memory.
    # 200 us in two kernels: the GEMM 100 us and a split-K reduction 100 us.
    counts = count(lambda: a @ w)
    run = ProfiledRun(counts=counts, device="cuda", op_time_s={},
                      kernels=[Kernel("sm90_xmma_gemm", 100 * US, 0),
                               Kernel("cublasLt::splitKreduce_kernel", 100 * US, 0)])
    run.tally_kernels()
    b = compute_budget(run, 200 * US, ceilings())
    (call,) = b.per_call
    assert call.roofline_fraction == pytest.approx(3 * 256 * 256 * 4 / 1e10 / 200e-6)
    assert call.roof_band == "25-50%"
    assert call.cause == ("non-GEMM kernels (layout transposes, split-K reductions) take "
                          "50% of its time")


def test_small_kernels_and_datasheet_roofs_as_causes():
    common = dict(time_s=8 * US, floor_s=3 * US, math_floor_s=0.0, limit="bytes",
                  aux_s=0.0, calls=1)
    # 8 us in 2 kernels: 4 us each, under 2 x the 5 us one tiny op costs
    assert likely_cause(n_kernels=2, ceil=ceilings(), **common) == (
        "small kernels: 4 us each, under 2x the 5 us one tiny op costs here: fixed "
        "per-kernel costs (launch, ramp-up, tail), not bytes or math, set its time")
    # one 8 us op call on a CPU (no kernels): under 10 us, small too
    assert likely_cause(n_kernels=0, ceil=ceilings(device="cpu"), **common).startswith(
        "small op calls: 8 us each")
    big = dict(common, time_s=80 * US, floor_s=30 * US)
    assert likely_cause(n_kernels=1, ceil=ceilings(source="datasheet"), **big) == (
        "roofs from the datasheet, above what kernels reach: its fraction reads low")
    assert likely_cause(n_kernels=1, ceil=ceilings(), **big) == "unknown"


def test_under_25_percent_keeps_its_flag():
    x = torch.randn(65536)
    # mul: 2 x 256 KiB / 1e10 = 52.4 us; at 400 us, 13%: "<25%", below_roof as before
    run = run_of(lambda: x * 2, [400 * US])
    b = compute_budget(run, 400 * US, ceilings())
    assert b.per_call[0].roof_band == "<25%" and b.per_op[0].below_roof
    assert b.below_roof_s == pytest.approx(400 * US) and b.low_roof_s == 0.0


def attention_bf16():
    q, k, v = (torch.randn(1, 2, 256, 64, dtype=torch.bfloat16) for _ in range(3))

    def fwd():
        return torch.softmax((q @ k.transpose(-2, -1)) * 0.125, dim=-1) @ v

    return fwd


def test_attention_softmax_instruction_bound_puts_sdpa_first():
    # The shape in miniature: the softmax 60% of the time, instruction-bound.
    fn = attention_bf16()
    counts = count(fn)
    ops = [r.op for r in counts.records]
    times = {"aten::bmm": 10 * US, "aten::mul": 10 * US, "aten::_softmax": 60 * US}
    run = run_of(fn, [times.get(op, 0.0) for op in ops])
    sm_i = ops.index("aten::_softmax")
    # 2 x 256 x 256 = 131072 scores, softmax at 2.5 G elem/s: math floor 52.4 us of 60 us
    # (87%); at 10 GB/s its 524288 B need 52.4 us too (87% >= 50%): the bytes explain it
    b = compute_budget(run, 100 * US, ceilings(softmax_elems_per_s={"bf16": 2.5e9}))
    sm = b.per_call[sm_i]
    assert sm.limit == "bytes"
    # at 40 GB/s the bytes need 13.1 us (22% < 50%): instruction-bound
    ceil = ceilings(softmax_elems_per_s={"bf16": 2.5e9}, bandwidth_bytes_per_s=4e10)
    b = compute_budget(run, 100 * US, ceil)
    sm = b.per_call[sm_i]
    assert sm.regime == "compute" and sm.limit == "instruction"
    assert b.regime == "compute" and b.compute_s_by_unit["instruction"] == pytest.approx(
        60 * US)
    v = verdict_for(b, counts, ceil, "cuda", None, None)
    assert v.regime == "compute"
    assert any(e.startswith("60 us (60% of T_wall) is element-wise math bound by "
                            "instruction throughput, not bytes: aten::_softmax: softmax "
                            "bf16: 131 k elem") for e in v.evidence), v.evidence
    assert not any("TFLOP/s" in e for e in v.evidence)  # no FLOP-rate sentence for it
    rems = remedies_for(b, counts, ceil, "cuda", None, None)
    assert rems[0].spec == "sdpa", [(r.spec, r.predicted_speedup) for r in rems]
    # exponentials stay: 131072 / 4e9 (calibrated exp bf16) = 32.768 us; 27.232 us saved.
    # Memory: score traffic 2 x 262144 (QK^T write, PV read) + 524288 (mul) = 1048576 B
    # without the softmax's own bytes, at 4e10 = 26.2144 us (of the 30 us memory part:
    # both bmm, 393216 B / 4e10 = 9.8 us > 1.7 us of FLOPs, and the mul).
    assert rems[0].basis == ("1 attention(s): 1.05 MB of score-matrix traffic at the "
                             "measured bandwidth = 26.2 us; the softmax's 60 us of "
                             "instruction-bound math runs in registers, fused, but its "
                             "exponentials stay (32.8 us at the calibrated exp rate): "
                             "27.2 us saved")
    # saved 26.2144 us memory + 27.232 us compute of 100 us: 100 / 46.5536 = 2.148x
    assert b.memory_s == pytest.approx(30 * US)
    assert rems[0].predicted_speedup == pytest.approx(100 / (100 - 26.2144 - 27.232))
    compile_ = next(r for r in rems if r.spec == "compile")
    assert compile_.predicted_speedup < rems[0].predicted_speedup


@pytest.fixture(scope="module")
def softmax_trace(tmp_path_factory):
    """A CPU trace of a softmax over [64, 4096] fp32, two profiled steps."""
    import warnings

    from torch.profiler import ProfilerActivity, profile, schedule

    x = torch.randn(64, 4096)
    path = tmp_path_factory.mktemp("trace") / "softmax.json"
    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            torch.softmax(x, -1)
            prof.step()
    return path


# A rate of 1000 elem/s: 262144 elements need 262 s, far more than any measured time; at
# 10 TB/s its 2 MiB need 0.2 us, at 1 PFLOP/s its FLOPs 1.3 ns: instruction-bound, whatever
# this CPU's speed.
TRACE_CEILINGS = dict(device="cpu", bandwidth_bytes_per_s=1e13,
                      peak_flops_per_s={"fp32": 1e15})


@pytest.fixture(scope="module")
def slow_softmax_report(softmax_trace):
    from gobrrr.analyze import analyze

    return analyze([softmax_trace],
                   ceilings=ceilings(softmax_elems_per_s={"fp32": 1e3}, **TRACE_CEILINGS))


def test_analyze_of_a_trace_goes_through_the_same_rule(softmax_trace, slow_softmax_report):
    from gobrrr.analyze import analyze
    from gobrrr.schema import validate

    row = next(r for r in slow_softmax_report.budget.per_op if r.name == "aten::_softmax")
    assert row.limit == "instruction" and row.reason.startswith(
        "softmax fp32: 262 k elem at 1 kelem/s calibrated = 262 s of ")
    assert slow_softmax_report.budget.compute_s_by_unit["instruction"] == row.time_s
    # no fp32 softmax rate: not checked, and said so
    none = analyze([softmax_trace],
                   ceilings=ceilings(softmax_elems_per_s={}, **TRACE_CEILINGS))
    row = next(r for r in none.budget.per_op if r.name == "aten::_softmax")
    assert row.limit == "bytes"
    assert any("no calibrated element-wise rate for softmax fp32" in n for n in none.notes)
    validate(json.loads(slow_softmax_report.to_json()), "report")


def test_terminal_shows_the_instruction_bound_op_and_its_reason(slow_softmax_report,
                                                                 capsys, monkeypatch):
    from gobrrr.show.terminal import print_report

    monkeypatch.setenv("TERMINAL_WIDTH", "300")
    monkeypatch.setenv("NO_COLOR", "1")
    print_report(slow_softmax_report.to_dict())
    out = capsys.readouterr().out
    assert "instr." in out  # the bound column of the per-op row
    assert "instr.: compute-bound by element-wise instruction throughput" in out
    assert "below their roof" in out
    assert "aten::_softmax" in out and "softmax fp32: 262 k elem at 1 kelem/s" in out


def test_html_shows_the_instruction_bound_op_and_its_reason(slow_softmax_report):
    from gobrrr.show import render_report

    d = json.loads(slow_softmax_report.to_json())
    page = render_report(d)
    section = page[page.index('id="below-roof"'):page.index('id="remedies"')]
    assert "aten::_softmax" in section and "compute (instruction)" in section
    assert "softmax fp32: 262 k elem at 1 kelem/s calibrated" in section
    ops = page[page.index('id="ops"'):page.index('id="modules"')]
    assert "compute (instruction)" in ops


def test_calibrate_and_html_show_the_math_rates(capsys, monkeypatch):
    from gobrrr.show.report_html import _ceilings_table
    from gobrrr.show.terminal import print_ceilings

    monkeypatch.setenv("TERMINAL_WIDTH", "200")
    ceil = ceilings(details={"math_row": 4096})
    print_ceilings(ceil)
    out = capsys.readouterr().out
    # softmax bf16 1e9 elem/s x 4 B = 4 GB/s = 40% of 10 GB/s; exp fp32 1.25e9 x 8 B = 100%
    assert "softmax (rows of 4096)" in out
    assert "1 Gelem/s" in out and "4 GB/s" in out and "40%" in out
    assert "1.25 Gelem/s" in out and "100%" in out
    # the HTML machine section, from a report dict's machine
    html = str(_ceilings_table(ceil.to_dict()))
    assert "softmax (rows of 4096) bf16" in html
    assert "1 Gelem/s, 4 GB/s = 40% of the bandwidth" in html


def test_attention_example_on_this_cpu():
    # Measured on this CPU, so only what holds whatever the machine: the softmax gets a
    # math floor from the fp32 calibration, the rule's answer is consistent with its own
    # thresholds, and the hand-written attention is found (SDPA among the remedies). On
    # the 2-core CI VM the example's small softmax (2 M elements, 8 MB: cache-resident)
    # ran faster than the calibrated large one, so it is not asserted instruction-bound.
    from gobrrr.api import diagnose_workload
    from gobrrr.budget import INSTRUCTION_EXPLAINS_FRACTION, LOW_ROOF_FRACTION
    from gobrrr.targets import load_target

    r = diagnose_workload(load_target("examples:attention", "cpu"), experiments=False,
                          time_budget_s=0.3)
    (sm,) = [c for c in r.budget.per_call if c.op == "aten::_softmax"]
    assert sm.math_floor_s > 0 and r.ceilings.softmax_elems_per_s["fp32"] > 0
    # 2 x 4 x 512 x 512 = 2097152 scores at the calibrated rate
    assert sm.math_floor_s == pytest.approx(2097152 / r.ceilings.softmax_elems_per_s["fp32"])
    if sm.limit == "instruction":
        assert sm.regime == "compute" and sm.reason
        assert sm.math_floor_s >= INSTRUCTION_EXPLAINS_FRACTION * sm.time_s
    else:
        assert sm.limit == "bytes" and sm.reason is None
        assert (sm.math_floor_s < INSTRUCTION_EXPLAINS_FRACTION * sm.time_s
                or sm.floor_s >= LOW_ROOF_FRACTION * sm.time_s)
    assert "sdpa" in {rem.spec for rem in r.remedies}


@pytest.mark.cuda
def test_attention_example_on_cuda_is_softmax_instruction_bound_with_sdpa_first():
    # The case (bf16, 8 x 12 heads x 4096 x 64): benchmarks/attention_softmax.py
    # prints the figures.
    from gobrrr.api import diagnose_workload
    from gobrrr.targets import load_target

    r = diagnose_workload(load_target("examples:attention", "cuda"), experiments=False)
    top = r.budget.per_op[0]
    assert top.name == "aten::_softmax" and top.limit == "instruction", top.to_dict()
    assert r.remedies[0].spec == "sdpa", [(x.spec, x.predicted_speedup) for x in r.remedies]


def test_perfetto_op_events_carry_limit_and_why(slow_softmax_report):
    from gobrrr.show.perfetto import trace_dict

    events = trace_dict(json.loads(slow_softmax_report.to_json()))["traceEvents"]
    (sm,) = [e for e in events if e.get("args", {}).get("op") == "aten::_softmax"
             and e.get("ph") == "X"]
    assert sm["args"]["limit"] == "instruction"
    assert sm["args"]["why"].startswith("softmax fp32: 262 k elem at 1 kelem/s")


def test_a_report_of_1_3_without_the_new_fields_validates_and_renders(slow_softmax_report):
    from gobrrr.schema import validate
    from gobrrr.show import render_report

    d = json.loads(slow_softmax_report.to_json())
    d["schema_version"] = "1.3"
    for key in ("low_roof_s", "low_roof_threshold"):
        del d["budget"][key]
    for row in d["budget"]["per_call"]:
        for key in ("limit", "math_floor_s", "reason", "cause", "roof_band"):
            del row[key]
    for rows in ("per_op", "per_module", "per_class"):
        for row in d["budget"][rows]:
            for key in ("limit", "math_floor_s", "reason", "cause", "roof_band",
                        "instruction_s"):
                del row[key]
    validate(d, "report")
    assert 'id="below-roof"' in render_report(d)

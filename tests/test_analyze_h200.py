"""`gobrrr analyze` of two H200 traces against `gobrrr doctor` of the same workloads on the
same H200 the same day (benchmarks/analyze_gpu.sh; the figures are in
benchmarks/results/h200/analyze-vs-doctor.md):

- attention.json.gz: the issue's hand-written attention, softmax(q k^T / 8) v in bf16 over
  [8, 12, 4096, 64] (`gobrrr doctor examples:attention --device cuda`);
- gpt2_train_step.json.gz: one GPT-2 small training step, 4 x 256 tokens, the LM's own
  loss, backward, AdamW (`gobrrr doctor hf:gpt2 --train --batch-size 4 --seq-len 256`).

Both recorded by benchmarks/record_traces.py with plain torch.profiler (record_shapes).
With the H200's calibration cached (conftest's h200_calibration) the ceilings are measured
ones, as `analyze` on that GPU would read them.
"""

import gzip
import json
import statistics
from pathlib import Path

import pytest

from gobrrr.analyze import analyze
from gobrrr.remedies.attention import find_attention
from gobrrr.tracefile.columns import stream_trace
from gobrrr.tracefile.stepfind import find_steps

DATA = Path(__file__).parent / "data" / "traces"
ATTENTION = DATA / "attention.json.gz"
GPT2_TRAIN = DATA / "gpt2_train_step.json.gz"
# Issue 23's plain traces (a profile() block around 4 calls, then torch.cuda.synchronize()
# inside it; no schedule, no prof.step()), recorded on the H200 on 2026-12-02 by
# benchmarks/plain_traces_gpu.py's record(), with doctor's figures beside them
# (benchmarks/results/h200/plain-traces-analyze.md)
PLAIN_POINTWISE = DATA / "plain_pointwise.json.gz"  # ((x * 2).sin() + 1).relu(), 2^24
PLAIN_RESNET = DATA / "plain_resnet50_compiled.json.gz"  # torch.compile'd, batch 256


def row(report, op):
    return next(r for r in report.budget.per_op if r.name == op)


def test_attention_softmax_is_instruction_bound_and_sdpa_comes_first(h200_calibration):
    # doctor on the H200: compute 0.588, memory 0.391, overhead 0.021 of 8.50 ms; the
    # softmax 4.99 ms (59%), limit "instruction" at 30% of its roof; SDPA first (4.27x
    # predicted, 8.84x measured by benchmarks/attention_softmax.py).
    r = analyze([ATTENTION])
    assert r.ceilings.source == "cache"
    assert r.regime == "compute"
    sm = row(r, "aten::_softmax")
    assert max(r.budget.per_op, key=lambda o: o.time_s) is sm
    assert sm.time_s / r.budget.wall_s > 0.5
    assert sm.limit == "instruction" and sm.bound == "compute"
    assert sm.reason.startswith("softmax bf16: 1.61 G elem at 324 Gelem/s calibrated")
    assert r.budget.compute_s_by_unit == {"instruction": pytest.approx(sm.time_s)}
    assert [x.spec for x in r.remedies][0] == "sdpa"
    # one chain QK^T (bmm), the scale (mul), the softmax, PV (bmm), linked by shapes
    chains = find_attention(r.counts.records)
    assert [[r.counts.records[i].op for i in c.ops if r.counts.records[i].op_class != "view"]
            for c in chains] == [["aten::bmm", "aten::mul", "aten::_softmax", "aten::bmm"]]
    # the score matrix: 8 x 12 x 4096 x 4096 bf16
    assert chains[0].score_bytes == 8 * 12 * 4096 * 4096 * 2
    assert any("hand-written attention chain(s) (QK^T, softmax, PV) behind the SDPA remedy "
               "link ops by tensor shapes" in n for n in r.notes)


def test_attention_with_datasheet_ceilings_says_the_instruction_bound_was_not_checked():
    # No calibration of an H200 here: no element-wise math rates, so the softmax stays
    # memory-bound, flagged between 25% and 50% of its roof, and a note says why.
    r = analyze([ATTENTION])
    assert r.ceilings.source == "datasheet"
    sm = row(r, "aten::_softmax")
    assert sm.bound == "memory" and sm.roof_band == "25-50%"
    assert any(n.startswith("no calibrated element-wise rate for softmax bf16")
               for n in r.notes)
    sdpa = r.remedies[0]
    assert sdpa.spec == "sdpa" and "at the datasheet bandwidth" in sdpa.basis


def test_gpt2_training_step_is_compute_bound_like_doctor(h200_calibration):
    # doctor on the H200: compute 0.632, memory 0.195, overhead 0.173 of 32.7 ms (unprofiled
    # loop). The trace's step ran 42.3 ms under the profiler with record_shapes, whose
    # per-op CPU cost leaves the GPU idle longer: its overhead share (0.36) is an upper
    # bound, which a note says; the regime is the same.
    r = analyze([GPT2_TRAIN])
    assert r.regime == "compute"
    assert r.fractions["compute"] > r.fractions["overhead"] > r.fractions["memory"]
    assert any("this overhead is an upper bound" in n for n in r.notes)
    flops = {}
    for rec in r.counts.records:
        flops[rec.op] = flops.get(rec.op, 0) + rec.flops
    b, h, s, d, layers = 4, 12, 256, 64, 12
    # forward SDPA: QK^T and PV; backward: five matmuls of that size (torch's formula).
    one = 2 * b * h * s * s * d
    assert flops["aten::_scaled_dot_product_efficient_attention"] == layers * 2 * one
    # recorded with attn_bias "" (undefined) where the schema says Tensor: rebuilt anyway
    assert flops["aten::_scaled_dot_product_efficient_attention_backward"] == (
        layers * 5 * one)
    # doctor counted 796.0 GFLOP per step; the trace 794.5: AdamW's foreach ops, whose
    # 148-tensor lists the profiler records without shapes, are the difference.
    assert sum(flops.values()) == pytest.approx(796_006_237_344, rel=0.005)
    adamw = [x for x in r.budget.per_op if x.name.startswith("aten::_foreach_")]
    assert adamw and all(x.bound == "memory" and x.flops == 0 for x in adamw)
    assert any("a tensor list recorded without shapes" in n for n in r.notes)
    # GPT-2 calls SDPA: no hand-written attention to find
    assert find_attention(r.counts.records) == []


def _raw(path):
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_plain_pointwise_trace_ends_its_last_call_with_the_call(h200_calibration):
    # doctor on the H200: memory 0.907, overhead 0.093 of 0.146 ms. Before: the last
    # call's window ran to the trace's end (its synchronize and the profiler's exit),
    # 286 us against 116-135 us: memory 0.765 of 0.179 ms.
    events = _raw(PLAIN_POINTWISE)
    tops = sorted((e for e in events if e.get("cat") == "cpu_op"),
                  key=lambda e: (e["ts"], -e["dur"]))
    top, end = [], -1.0
    for e in tops:  # top-level: aten::relu's aten::clamp_min is inside it
        if e["ts"] >= end:
            top.append(e)
            end = e["ts"] + e["dur"]
    calls = [top[i:i + 4] for i in range(0, len(top), 4)]  # mul, sin, add, relu
    ends = [max(e["ts"] + e["dur"] for e in c) for c in calls]
    starts = [c[0]["ts"] for c in calls]
    loop_us = statistics.median(s - e for e, s in zip(ends[:-1], starts[1:], strict=True))
    cols = find_steps(stream_trace(PLAIN_POINTWISE))
    assert len(calls) == 4 and len(cols.steps) == 3  # the first call: a warm-up
    assert cols.steps[-1][2] == pytest.approx(ends[-1] + loop_us - starts[-1], abs=1e-3)
    assert cols.steps[-1][2] < 120  # us; to the trace's end: 286
    r = analyze([PLAIN_POINTWISE])
    assert r.regime == "memory"
    assert r.fractions["memory"] == pytest.approx(0.907, abs=0.1)  # doctor's


def test_plain_compiled_resnet_leaves_the_warm_up_calls_kernels_out(h200_calibration):
    # doctor on the H200: 16.75 ms per call, 16.04 ms of it kernels. The first call's
    # host side (9.9 ms) was left out as a warm-up while its 16 ms of kernels were still
    # queued: counted from each call's first host event, the kept steps held them too,
    # 19.1 ms of kernels per step in 19.5 ms, the warm-up's as memory of no op.
    events = _raw(PLAIN_RESNET)
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]}
    cols = find_steps(stream_trace(PLAIN_RESNET))
    first_us = cols.steps[0][1]
    kept = [k for k in events if k.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")
            and launch[k["args"]["correlation"]] >= first_us]
    assert len(cols.steps) == 3 and len(kept) == 3 * 176  # 176 kernels a call
    r = analyze([PLAIN_RESNET])
    b = r.budget
    # one stream, the GPU busy throughout: the kept calls' kernels, once each
    assert b.busy_s == pytest.approx(sum(k["dur"] for k in kept) / 3 * 1e-6, rel=1e-6)
    assert 16.0e-3 < b.wall_s < 16.4e-3  # each call from the completion of the one before
    assert b.compute_s_by_unit.get("unlinked", 0.0) == 0.0
    assert "176 kernel(s) (16001.4 us) ran outside the profiled steps: not counted" in r.notes
    # The split still differs from doctor's (compute 0.483, memory 0.475): doctor's
    # compiled path counts an extern call's bytes from its recorded arguments, so a
    # convolution's output is left out and the 1x1 convolutions that widen 64 -> 256
    # channels read as compute there; here (input + output) they are memory.
    assert r.fractions["memory"] > r.fractions["compute"]


def test_the_check_of_a_compiled_trace_says_compiled_calls_cost_more(h200_calibration):
    c = {r["item"]: r for r in analyze([PLAIN_RESNET]).workload["trace"]["check"]}
    step_ms = "; --step-ms (the step's time without the profiler) reads it as the program runs"
    assert c["profiler cost"]["detail"].endswith(
        "torch.compile's calls more so (their host time about doubled under the profiler "
        "in a measurement on an H200's host)" + step_ms)
    eager = {r["item"]: r for r in analyze([DATA / "plain_pointwise.json.gz"])
             .workload["trace"]["check"]}
    assert eager["profiler cost"]["detail"].endswith("unprofiled one" + step_ms)

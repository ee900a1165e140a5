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

from pathlib import Path

import pytest

from gobrrr.analyze import analyze
from gobrrr.remedies.attention import find_attention

DATA = Path(__file__).parent / "data" / "traces"
ATTENTION = DATA / "attention.json.gz"
GPT2_TRAIN = DATA / "gpt2_train_step.json.gz"


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

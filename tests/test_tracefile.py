"""Reading raw torch.profiler traces recorded elsewhere: three small traces recorded on
an NVIDIA H200 (torch 2.11, benchmarks/record_traces.py; two profiled steps each) under
tests/data/traces/. The expected numbers were counted independently from the raw JSON
(`[e for e in traceEvents if e["cat"] == "kernel"]`, their "dur" summed)."""

import gzip
from collections import Counter
from pathlib import Path

import pytest

from gobrrr.errors import UserError
from gobrrr.tracefile import read_trace

DATA = Path(__file__).parent / "data" / "traces"


def test_mlp_batch1_forward_kernels_ops_and_steps():
    t = read_trace(DATA / "mlp_b1_forward.json.gz")
    # 4 x (Linear -> GELU) at batch 1: one GEMV (addmm) and one GELU kernel per layer,
    # 8 kernels per step, 2 steps.
    assert len(t.kernels) == 16
    assert sum(k.dur_us for k in t.kernels) == pytest.approx(35.168, abs=1e-6)
    assert Counter(k.op for k in t.kernels) == {"aten::addmm": 8, "aten::gelu": 8}
    assert [s.name for s in t.steps] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert [len(t.kernels_in(s)) for s in t.steps] == [8, 8]
    assert [round(sum(k.dur_us for k in t.kernels_in(s)), 3) for s in t.steps] == \
        [17.632, 17.536]
    assert t.record_shapes and t.device_properties[0]["name"] == "NVIDIA H200"
    addmm = next(o for o in t.ops if o.name == "aten::addmm")
    assert addmm.input_dims[:2] == [[512], [1, 512]]  # bias, input: shapes were recorded


def test_training_step_links_every_kernel_to_its_op():
    t = read_trace(DATA / "mlp_train_step.json.gz")
    assert len(t.kernels) == 84 and [len(t.kernels_in(s)) for s in t.steps] == [42, 42]
    assert sum(k.dur_us for k in t.kernels) == pytest.approx(367.876, abs=1e-6)
    assert all(k.op is not None for k in t.kernels)
    ops = Counter(k.op for k in t.kernels)
    # Per step, as recorded: 4 forward addmm, each a CUTLASS SGEMM plus cuBLASLt's
    # split-K reduction (8 kernels); backward 3 grad-input mm (the first layer's input
    # needs none), each also split-K (6), and 4 grad-weight mm (4): 10 mm kernels.
    assert ops["aten::addmm"] == 2 * 8 and ops["aten::mm"] == 2 * 10
    # Adam (foreach): one multi-tensor kernel per _foreach op per step.
    assert ops["aten::_foreach_addcdiv_"] == 2


def test_pointwise_chain():
    t = read_trace(DATA / "pointwise_chain.json.gz")
    # ((x * 2).sin() + 1).relu() on 2^24 fp32: four kernels per step.
    assert Counter(k.op for k in t.kernels) == {"aten::mul": 2, "aten::sin": 2,
                                                "aten::add": 2, "aten::clamp_min": 2}
    assert sum(k.dur_us for k in t.kernels) == pytest.approx(266.719, abs=1e-6)


def test_bad_inputs_are_one_line_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        read_trace(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("not json")
    with pytest.raises(UserError, match="is not JSON"):
        read_trace(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"a": 1}')
    with pytest.raises(UserError, match="not a torch.profiler trace"):
        read_trace(tmp_path / "y.json")
    whole = (DATA / "pointwise_chain.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UserError, match="cannot read it"):
        read_trace(tmp_path / "cut.json.gz")
    assert gzip.decompress(whole)  # the committed file itself is whole

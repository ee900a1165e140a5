"""Reading raw torch.profiler traces recorded elsewhere: three small traces recorded on
an NVIDIA H200 (torch 2.11, benchmarks/record_traces.py; two profiled steps each) under
tests/data/traces/. The expected numbers were counted independently from the raw JSON
(`[e for e in traceEvents if e["cat"] == "kernel"]`, their "dur" summed); here they are
read through the reader analyze uses (the header, and the events streamed into
columns), each kernel joined to its CPU op by External id as Kineto writes it."""

import gzip
from collections import Counter
from pathlib import Path

import pytest

from gobrrr.errors import UserError
from gobrrr.tracefile.columns import CPU_OP, DEVICE_KINDS, stream_trace
from gobrrr.tracefile.read import read_header

DATA = Path(__file__).parent / "data" / "traces"


def kernels(path):
    """(name, dur_us, launching op's name or None, its start us or None) per kernel, in
    start order: the links a kernel's `args["External id"]` makes to its `cpu_op`."""
    c = stream_trace(path)
    cpu, dev = c.cpu, c.device
    ops = {int(e): i for i, e in enumerate(cpu["ext"].tolist())
           if e >= 0 and cpu["kind"][i] == CPU_OP}
    out = []
    for i in sorted(range(len(dev["ts_us"])), key=lambda i: dev["ts_us"][i]):
        if DEVICE_KINDS[dev["kind"][i]] != "kernel":
            continue
        j = ops.get(int(dev["ext"][i]))
        out.append((c.names[dev["name"][i]], float(dev["dur_us"][i]),
                    None if j is None else c.names[cpu["name"][j]],
                    None if j is None else float(cpu["ts_us"][j])))
    return c, out


def in_step(ks, step):
    """Kernels launched during a step: those whose CPU op starts inside the step's CPU
    span (a kernel itself may run after the step's CPU side has ended)."""
    _n, ts, dur = step
    return [k for k in ks if k[3] is not None and ts <= k[3] <= ts + dur]


def test_mlp_batch1_forward_kernels_ops_and_steps():
    c, ks = kernels(DATA / "mlp_b1_forward.json.gz")
    # 4 x (Linear -> GELU) at batch 1: one GEMV (addmm) and one GELU kernel per layer,
    # 8 kernels per step, 2 steps.
    assert len(ks) == 16
    assert sum(k[1] for k in ks) == pytest.approx(35.168, abs=1e-6)
    assert Counter(k[2] for k in ks) == {"aten::addmm": 8, "aten::gelu": 8}
    assert [f"ProfilerStep#{s[0]}" for s in c.steps] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert [len(in_step(ks, s)) for s in c.steps] == [8, 8]
    assert [round(sum(k[1] for k in in_step(ks, s)), 3) for s in c.steps] == \
        [17.632, 17.536]
    h = read_header(DATA / "mlp_b1_forward.json.gz")
    assert h.record_shapes and h.device_properties[0]["name"] == "NVIDIA H200"
    addmm = next(i for i, n in enumerate(c.cpu["name"].tolist())
                 if c.names[n] == "aten::addmm")
    # bias, input: shapes were recorded
    assert c.sigs[c.cpu["sig"][addmm]].dims[:2] == [[512], [1, 512]]


def test_training_step_links_every_kernel_to_its_op():
    c, ks = kernels(DATA / "mlp_train_step.json.gz")
    assert len(ks) == 84 and [len(in_step(ks, s)) for s in c.steps] == [42, 42]
    assert sum(k[1] for k in ks) == pytest.approx(367.876, abs=1e-6)
    assert all(k[2] is not None for k in ks)
    ops = Counter(k[2] for k in ks)
    # Per step, as recorded: 4 forward addmm, each a CUTLASS SGEMM plus cuBLASLt's
    # split-K reduction (8 kernels); backward 3 grad-input mm (the first layer's input
    # needs none), each also split-K (6), and 4 grad-weight mm (4): 10 mm kernels.
    assert ops["aten::addmm"] == 2 * 8 and ops["aten::mm"] == 2 * 10
    # Adam (foreach): one multi-tensor kernel per _foreach op per step.
    assert ops["aten::_foreach_addcdiv_"] == 2


def test_pointwise_chain():
    _c, ks = kernels(DATA / "pointwise_chain.json.gz")
    # ((x * 2).sin() + 1).relu() on 2^24 fp32: four kernels per step.
    assert Counter(k[2] for k in ks) == {"aten::mul": 2, "aten::sin": 2,
                                         "aten::add": 2, "aten::clamp_min": 2}
    assert sum(k[1] for k in ks) == pytest.approx(266.719, abs=1e-6)


@pytest.mark.parametrize("read", [read_header, stream_trace])
def test_bad_inputs_are_one_line_user_errors(tmp_path, read):
    with pytest.raises(UserError, match="no such file"):
        read(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("not json")
    with pytest.raises(UserError, match="is not JSON"):
        read(tmp_path / "x.json")
    whole = (DATA / "pointwise_chain.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UserError, match="cannot read it"):
        read(tmp_path / "cut.json.gz")
    assert gzip.decompress(whole)  # the committed file itself is whole


def test_a_json_that_is_no_trace_is_one_line(tmp_path):
    (tmp_path / "y.json").write_text('{"a": 1}')
    with pytest.raises(UserError, match="not a torch.profiler trace"):
        read_header(tmp_path / "y.json")


def _huge_trace(tmp_path, value):
    """A .json.gz whose one event carries `value` (bytes) as its name."""
    path = tmp_path / "huge.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": ' + value +
                b', "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}')
    return path


@pytest.mark.parametrize("value", [b'"' + b"a" * (40 * 2**20) + b'"',  # a 40 MiB string
                                   b"1" * (40 * 2**20)])  # a 40 MiB number
def test_a_huge_token_is_refused_in_one_line(tmp_path, value):
    # issue 28: a 4 MB .json.gz holding a 4 GiB string ran for hours (ijson's scan of a
    # token grows with its square); any token over MAX_TOKEN_BYTES (16 MiB) is refused
    import time

    from gobrrr.tracefile.read import MAX_TOKEN_BYTES

    assert len(value) > 2 * MAX_TOKEN_BYTES
    path = _huge_trace(tmp_path, value)
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="holds a token of over 16 MiB"):
        stream_trace(path)
    # refused within a buffer or two of the limit: ~0.2 s here; 10 s is the bound
    assert time.perf_counter() - t0 < 10


def test_whitespace_and_long_names_below_the_limit_are_read(tmp_path):
    # whitespace outside strings is no token; a name of 1 MiB (far above any kernel's)
    # is a token below the limit
    path = _huge_trace(tmp_path, b" " * (20 * 2**20) + b'"' + b"k" * 2**20 + b'"')
    c = stream_trace(path)
    assert c.names and max(len(n) for n in c.names) == 2**20

"""The --trace output: a valid Chrome/Perfetto JSON trace with gobrrr's annotations.

The perfetto package's TraceProcessor downloads its trace_processor binary at run time,
which this closed network cannot do; so the trace is checked against the Trace Event
Format itself (JSON object form, complete and metadata events), field by field."""

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from gobrrr.cli import cli
from gobrrr.counting import CountResult, OpRecord
from gobrrr.hardware import Ceilings
from gobrrr.perfetto import TID_IDLE, TID_KERNELS, TID_OPS, kernel_starts_us, trace_dict
from gobrrr.trace import WINDOW, Kernel, ProfiledRun


def check_format(trace):
    """The Trace Event Format rules a viewer relies on."""
    assert set(trace) >= {"traceEvents"}
    json.dumps(trace)  # serializable as is
    for ev in trace["traceEvents"]:
        assert ev["ph"] in ("X", "M"), ev
        assert isinstance(ev["name"], str) and isinstance(ev["pid"], int)
        if ev["ph"] == "X":
            assert isinstance(ev["tid"], int)
            assert isinstance(ev["ts"], (int, float)) and ev["ts"] >= 0
            assert isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0
            assert isinstance(ev["args"], dict)
        else:
            assert ev["name"] in ("process_name", "thread_name", "thread_sort_index")


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trace")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
        r = CliRunner().invoke(cli, ["doctor", "examples:mlp", "--device", "cpu", "-q",
                                     "--json", "--no-experiments", "--time-budget", "0.2",
                                     "--trace", str(tmp / "t.json")])
    assert r.exit_code == 0, r.output
    return json.loads((tmp / "t.json").read_text()), json.loads(r.stdout)


def test_cpu_trace_is_valid_and_annotated(cpu_trace):
    trace, report = cpu_trace
    check_format(trace)
    assert trace["otherData"]["gobrrr.timeline"].startswith("synthesized")
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == TID_OPS]
    assert ops
    for e in ops:
        a = e["args"]
        assert a["regime"] in ("compute", "memory", "overhead")
        assert {"flops", "bytes", "roofline_pct", "module", "op"} <= set(a)
    # Laid end to end: each op starts where the previous one ended.
    for prev, nxt in zip(ops, ops[1:], strict=False):
        assert nxt["ts"] == pytest.approx(prev["ts"] + prev["dur"], abs=2e-3)
    # The ops and the rest add up to the wall time of the report (in us).
    rest = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == TID_IDLE]
    total_us = sum(e["dur"] for e in ops + rest)
    assert total_us == pytest.approx(max(report["budget"]["wall_s"] * 1e6,
                                         sum(e["dur"] for e in ops)), rel=1e-3)


def test_trace_needs_a_live_run():
    from gobrrr.errors import UserError

    with pytest.raises(UserError, match="no profiled run"):
        trace_dict(SimpleNamespace(run=None))


def rec(index, op, flops, nbytes, op_class="matmul", unit="fp32"):
    return OpRecord(index=index, op=op, module="Net.fc", phase="forward", op_class=op_class,
                    dtype="float32", flops=flops, bytes=nbytes, tensor_core_unit=unit,
                    has_formula=True)


class FakeEvent:
    def __init__(self, name, start, end, device="CUDA"):
        self.name = name
        self.time_range = SimpleNamespace(start=start, end=end)
        self.device_type = SimpleNamespace(name=device)


def fake_cuda_report():
    """Two ops, three kernels (us): mm 100-110, relu 115-120, relu's second kernel
    120-130; an earlier call's mm at 10-20 (outside the counted window) must be ignored."""
    # mm: 2*M*N*K = 2*64*64*64 = 524288 FLOPs; bytes 3*64*64*4 = 49152.
    # relu: 0 FLOPs (no formula needed here), bytes 2*4096*4 = 32768.
    records = [rec(0, "aten::mm", 524288, 49152),
               rec(1, "aten::relu", 0, 32768, op_class="pointwise", unit=None)]
    kernels = [Kernel("sgemm_64x64", 10e-6, 0), Kernel("relu_kernel", 5e-6, 1),
               Kernel("relu_kernel", 10e-6, 1)]
    raw = SimpleNamespace(events=lambda: [
        FakeEvent("sgemm_64x64", 10.0, 20.0), FakeEvent(WINDOW, 90.0, 140.0, "CPU"),
        FakeEvent("sgemm_64x64", 100.0, 110.0), FakeEvent("relu_kernel", 120.0, 130.0),
        FakeEvent("relu_kernel", 115.0, 120.0)])
    run = ProfiledRun(counts=CountResult(records), device="cuda",
                      op_time_s={0: 10e-6, 1: 15e-6}, kernels=kernels, busy_s=25e-6, raw=raw)
    # 1 TFLOP/s fp32 and 1 TB/s: mm needs 0.524 us of math vs 0.049 us of memory.
    ceil = Ceilings(device="cuda", fingerprint={"name": "FakeGPU", "torch": "x"},
                    peak_flops_per_s={"fp32": 1e12}, bandwidth_bytes_per_s=1e12,
                    op_overhead_s=5e-6, python_ops_per_s=3e7, measured_at="t",
                    calibrate_s=0.0)
    return SimpleNamespace(run=run, ceilings=ceil, budget=SimpleNamespace(wall_s=50e-6),
                           workload={"name": "fake"}, regime="overhead", created="t")


def test_kernel_start_times_come_from_the_device_events():
    # relu kernels matched by duration, not by order: 5 us -> 115, 10 us -> 120.
    assert kernel_starts_us(fake_cuda_report().run) == [100.0, 115.0, 120.0]


def test_cuda_trace_kernels_ops_and_idle_gaps():
    trace = trace_dict(fake_cuda_report())
    check_format(trace)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    kernels = [(e["name"], e["ts"], e["dur"]) for e in xs if e["tid"] == TID_KERNELS]
    assert kernels == [("sgemm_64x64", 0.0, 10.0), ("relu_kernel", 15.0, 5.0),
                       ("relu_kernel", 20.0, 10.0)]
    ops = {e["name"]: e for e in xs if e["tid"] == TID_OPS}
    assert (ops["aten::relu"]["ts"], ops["aten::relu"]["dur"]) == (15.0, 15.0)
    mm = ops["aten::mm"]["args"]
    assert mm["regime"] == "compute" and mm["flops"] == 524288
    # floor 524288 FLOPs / 1e12 = 0.524288 us of a 10 us kernel: 5.2% of roofline.
    assert mm["roofline_floor_us"] == pytest.approx(0.5243, abs=1e-4)
    assert mm["roofline_pct"] == 5.2
    assert ops["aten::relu"]["args"]["regime"] == "memory"
    idle = [(e["ts"], e["dur"]) for e in xs if e["tid"] == TID_IDLE]
    assert idle == [(10.0, 5.0)]  # between the mm's end (110) and relu's start (115)
    meta = trace["otherData"]
    assert meta["gobrrr.idle_between_kernels_us"] == 5.0
    assert meta["gobrrr.first_to_last_kernel_us"] == 30.0
    assert meta["gobrrr.kernels_without_start_time"] == 0


def test_cuda_trace_without_profiler_times_places_kernels_in_order():
    r = fake_cuda_report()
    r.run.raw = None
    trace = trace_dict(r)
    check_format(trace)
    assert trace["otherData"]["gobrrr.kernels_without_start_time"] == 3
    kernels = [(e["ts"], e["dur"]) for e in trace["traceEvents"]
               if e["ph"] == "X" and e["tid"] == TID_KERNELS]
    assert kernels == [(0.0, 10.0), (10.0, 5.0), (15.0, 10.0)]

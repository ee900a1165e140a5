"""The --trace output: a valid Chrome/Perfetto JSON trace with gobrrr's annotations.

The perfetto package's TraceProcessor downloads its trace_processor binary at run time,
which this closed network cannot do; so the trace is checked against the Trace Event
Format itself (JSON object form, complete and metadata events), field by field."""

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from gobrrr.budget import compute_budget
from gobrrr.cli import cli
from gobrrr.counting import CountResult, OpRecord
from gobrrr.hardware import Ceilings
from gobrrr.profile import device_starts, kernels_with_starts
from gobrrr.run import Kernel, ProfiledRun
from gobrrr.show.perfetto import TID_IDLE, TID_KERNELS, TID_OPS, trace_dict


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
def cpu_trace(tmp_path_factory, calibrated_cache):
    tmp = tmp_path_factory.mktemp("trace")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(calibrated_cache))  # the session's calibration
        # batch 4096: each Linear is 33 MFLOP, ~1 ms on this CPU, ~100x an empty op's
        # cost; at batch 1 every op's time, less that cost, came out 0 once beside a CPU
        # hog (no op to draw; 2026-12-04)
        r = CliRunner().invoke(cli, ["doctor", "examples:mlp", "--device", "cpu", "-q",
                                     "--batch-size", "4096",
                                     "--json", "--no-experiments", "--time-budget", "0.2",
                                     "--trace", str(tmp / "t.json")])
    assert r.exit_code == 0, r.output
    return json.loads((tmp / "t.json").read_text()), json.loads(r.stdout)


@pytest.mark.serial
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


def test_trace_needs_per_call_rows():
    from gobrrr.errors import UserError

    with pytest.raises(UserError, match="no per-call rows"):
        trace_dict({"budget": {}, "schema_version": "1.0"})


def test_trace_from_a_saved_json_equals_the_live_one(cpu_trace, tmp_path):
    # The trace is built from the report's dict alone, so `--json` output traces too.
    trace, report = cpu_trace
    again = trace_dict(json.loads(json.dumps(report)))
    assert again["traceEvents"] == trace["traceEvents"]


def rec(index, op, flops, nbytes, op_class="matmul", unit="fp32", phase="forward"):
    return OpRecord(index=index, op=op, module="Net.fc", phase=phase, op_class=op_class,
                    dtype="float32", flops=flops, bytes=nbytes, tensor_core_unit=unit,
                    has_formula=True)


class FakeEvent:
    """The fields of a torch.autograd.profiler FunctionEvent that trace.py reads."""

    def __init__(self, name, start, end, device="CUDA", id=0, linked=0, kernels=(),
                 children=()):
        self.name, self.id, self.linked_correlation_id = name, id, linked
        self.time_range = SimpleNamespace(start=start, end=end)
        self.device_type = SimpleNamespace(name=device)
        self.kernels = [SimpleNamespace(name=k, duration=d) for k, d in kernels]
        self.cpu_children = list(children)


def test_kernel_starts_linked_as_torch_2_13_does():
    # The launch (correlation 7) lists its kernels; each kernel event names the launch in
    # linked_correlation_id. An unrelated kernel of launch 8 with the same name is not
    # taken.
    launch = FakeEvent("cudaLaunchKernel", 90.0, 91.0, "CPU", id=7,
                       kernels=[("relu_kernel", 5.0), ("sgemm", 10.0)])
    events = [launch, FakeEvent("sgemm", 100.0, 110.0, id=3, linked=7),
              FakeEvent("relu_kernel", 115.0, 120.0, id=4, linked=7),
              FakeEvent("relu_kernel", 10.0, 15.0, id=5, linked=8)]
    got = [(k.name, t) for k, t in kernels_with_starts(launch, device_starts(events))]
    assert got == [("relu_kernel", 115.0), ("sgemm", 100.0)]


def test_kernel_starts_linked_as_torch_2_11_does():
    # Seen on the H200 (torch 2.11): the aten op lists the kernels, its runtime-call child
    # has the correlation id, and the kernel event carries that id as its own `id`.
    launch = FakeEvent("cudaLaunchKernelExC", 209.5, 210.0, "CPU", id=11)
    mm = FakeEvent("aten::mm", 209.2, 212.0, "CPU", id=2, kernels=[("sm80_xmma_gemm", 3.0)],
                   children=[launch])
    events = [mm, launch, FakeEvent("sm80_xmma_gemm", 2757.1, 2760.1, id=11)]
    assert [t for _k, t in kernels_with_starts(mm, device_starts(events))] == [2757.1]


def test_kernel_without_a_link_gets_no_start_time():
    launch = FakeEvent("cudaLaunchKernel", 90.0, 91.0, "CPU", id=7, kernels=[("sgemm", 1.0)])
    unlinked = [FakeEvent("sgemm", 100.0, 110.0, id=99)]
    assert [t for _k, t in kernels_with_starts(launch, device_starts(unlinked))] == [None]


def fake_cuda_report(starts=(100.0, 115.0, 120.0)):
    """Two ops, three kernels (us): mm 100-110, relu 115-120, relu's second kernel
    120-130."""
    # mm: 2*M*N*K = 2*64*64*64 = 524288 FLOPs; bytes 3*64*64*4 = 49152.
    # relu: 0 FLOPs (no formula needed here), bytes 2*4096*4 = 32768.
    records = [rec(0, "aten::mm", 524288, 49152),
               rec(1, "aten::relu", 0, 32768, op_class="pointwise", unit=None)]
    kernels = [Kernel("sgemm_64x64", 10e-6, 0, starts[0]),
               Kernel("relu_kernel", 5e-6, 1, starts[1]),
               Kernel("relu_kernel", 10e-6, 1, starts[2])]
    run = ProfiledRun(counts=CountResult(records), device="cuda",
                      op_time_s={0: 10e-6, 1: 15e-6}, kernels=kernels, busy_s=25e-6)
    # 1 TFLOP/s fp32 and 1 TB/s: mm needs 0.524 us of math vs 0.049 us of memory.
    ceil = Ceilings(device="cuda", fingerprint={"name": "FakeGPU", "torch": "x"},
                    peak_flops_per_s={"fp32": 1e12}, bandwidth_bytes_per_s=1e12,
                    op_overhead_s=5e-6, python_ops_per_s=3e7, measured_at="t",
                    calibrate_s=0.0)
    budget = compute_budget(run, 50e-6, ceil)
    return {"budget": budget.to_dict(), "workload": {"name": "fake", "device": "cuda"},
            "machine": ceil.to_dict(), "regime": budget.regime, "created": "t"}


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


def test_trace_kernel_regimes_are_the_budgets():
    # A conv-like op: a GEMM kernel plus a layout transpose. The budget gives the GEMM's
    # time to compute and the transpose's to memory; each kernel in the trace says the
    # same, and the two add up to the budget's split.
    records = [rec(0, "aten::convolution", 10**9, 10**6, op_class="conv")]
    run = ProfiledRun(counts=CountResult(records), device="cuda", op_time_s={0: 30e-6},
                      kernels=[Kernel("sm90_xmma_fprop", 20e-6, 0, 0.0),
                               Kernel("nchwToNhwcKernel", 10e-6, 0, 20.0)], busy_s=30e-6)
    ceil = Ceilings(device="cuda", fingerprint={"name": "FakeGPU", "torch": "x"},
                    peak_flops_per_s={"fp32": 1e12}, bandwidth_bytes_per_s=1e12,
                    op_overhead_s=5e-6, python_ops_per_s=3e7, measured_at="t",
                    calibrate_s=0.0)
    budget = compute_budget(run, 40e-6, ceil)
    report = {"budget": budget.to_dict(), "workload": {"name": "conv", "device": "cuda"},
              "machine": ceil.to_dict(), "regime": budget.regime, "created": "t"}
    trace = trace_dict(report)
    by_kernel = {e["name"]: e["args"]["regime"] for e in trace["traceEvents"]
                 if e["ph"] == "X" and e["tid"] == TID_KERNELS}
    assert by_kernel == {"sm90_xmma_fprop": "compute", "nchwToNhwcKernel": "memory"}
    assert budget.compute_s == pytest.approx(20e-6)
    assert budget.memory_s == pytest.approx(10e-6)


def test_kernel_events_carry_their_phase():
    # mm in the forward, relu in the backward, and a kernel outside any counted op
    # (an accumulate-grad copy, say): each kernel event names its kernel row's phase.
    records = [rec(0, "aten::mm", 524288, 49152),
               rec(1, "aten::relu", 0, 32768, op_class="pointwise", unit=None,
                   phase="backward")]
    kernels = [Kernel("sgemm_64x64", 10e-6, 0, 0.0), Kernel("relu_kernel", 5e-6, 1, 15.0),
               Kernel("copy_kernel", 2e-6, None, 25.0)]
    run = ProfiledRun(counts=CountResult(records), device="cuda",
                      op_time_s={0: 10e-6, 1: 5e-6}, kernels=kernels, busy_s=17e-6,
                      unattributed_s=2e-6)
    ceil = Ceilings(device="cuda", fingerprint={"name": "FakeGPU", "torch": "x"},
                    peak_flops_per_s={"fp32": 1e12}, bandwidth_bytes_per_s=1e12,
                    op_overhead_s=5e-6, python_ops_per_s=3e7, measured_at="t",
                    calibrate_s=0.0)
    budget = compute_budget(run, 50e-6, ceil)
    report = {"budget": budget.to_dict(), "workload": {"name": "fake", "device": "cuda"},
              "machine": ceil.to_dict(), "regime": budget.regime, "created": "t"}
    trace = trace_dict(report)
    phases = [(e["name"], e["args"]["phase"]) for e in trace["traceEvents"]
              if e["ph"] == "X" and e["tid"] == TID_KERNELS]
    assert phases == [("sgemm_64x64", "forward"), ("relu_kernel", "backward"),
                      ("copy_kernel", None)]
    # a report saved before kernel rows had a phase: the op's phase, as before
    for k in report["budget"]["kernels"]:
        del k["phase"]
    old = [e["args"].get("phase") for e in trace_dict(report)["traceEvents"]
           if e["ph"] == "X" and e["tid"] == TID_KERNELS]
    assert old == ["forward", "backward", None]


def test_cuda_trace_without_profiler_times_places_kernels_in_order():
    trace = trace_dict(fake_cuda_report(starts=(None, None, None)))
    check_format(trace)
    assert trace["otherData"]["gobrrr.kernels_without_start_time"] == 3
    kernels = [(e["ts"], e["dur"]) for e in trace["traceEvents"]
               if e["ph"] == "X" and e["tid"] == TID_KERNELS]
    assert kernels == [(0.0, 10.0), (10.0, 5.0), (15.0, 10.0)]

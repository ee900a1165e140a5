"""Compiled code in traces (tracefile/opcount.py with recorded.py, the live compiled
path's rules): an Inductor Triton kernel launched with no ATen op around it is an op of
its own, its bytes from its recorded tensor arguments, FLOPs for a template GEMM; a CPU
trace of compiled code, whose C++ kernels the profiler does not record, is one line.
The event layout is torch's (inductor's test_profiler: a `triton_poi_fused_add_cos_sin_0`
range around each launch, input_shapes [[4, 4], [4, 4], [4, 4], []])."""

import json

import pytest
import torch
from click.testing import CliRunner

from gobrrr.analyze import analyze
from gobrrr.cli import cli
from gobrrr.tracefile.columns import RecordedArgs
from gobrrr.tracefile.opcount import count_recorded

US = 1e-6
MIB = 1 << 20


def x(cat, name, ts, dur, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 1, "ts": ts, "dur": dur,
            "args": args}


def test_an_inductor_kernel_counts_as_the_live_path_counts_it():
    poi = count_recorded("triton_poi_fused_add_cos_sin_0", RecordedArgs(
        [[1024, 1024], [1024, 1024], [1024, 1024], []], ["float", "float", "float", "int"],
        None, None))
    assert (poi.op_class, poi.dtype, poi.flops, poi.bytes, poi.method) == (
        "pointwise", "fp32", 0, 3 * 4 * MIB, "kernel")
    # a template GEMM: [64, 32] @ [32, 16] -> [64, 16], bf16
    mm = count_recorded("triton_tem_fused_mm_0", RecordedArgs(
        [[64, 32], [32, 16], [64, 16]], ["c10::BFloat16"] * 3, None, None))
    assert (mm.op_class, mm.flops, mm.bytes, mm.tensor_core_unit, mm.has_formula) == (
        "matmul", 2 * 64 * 32 * 16, 2 * (2048 + 512 + 1024), "bf16", True)
    red = count_recorded("triton_red_fused_sum_1", None)  # no shapes: its class's regime
    assert (red.op_class, red.bytes, red.regime_hint) == ("reduction", 0, "memory")


def _compiled_step(t0, ext, corr, kernel_us):
    """One call of a compiled pointwise function on CUDA, as torch 2.11 records it."""
    dims = {"Input Dims": [[1024, 1024], [1024, 1024], [1024, 1024], []],
            "Input type": ["float", "float", "float", "int"], "External id": ext}
    return [x("cpu_op", "TorchDynamo Cache Lookup", t0, 5),
            x("cpu_op", "Torch-Compiled Region: 0/0", t0 + 6, 30),
            x("user_annotation", "## Call CompiledFxGraph abc", t0 + 10, 24),
            x("cpu_op", "triton_poi_fused_add_cos_sin_0", t0 + 12, 15, **dims),
            x("cuda_driver", "cuLaunchKernel", t0 + 14, 8, correlation=corr,
              **{"External id": ext}),
            x("kernel", "triton_poi_fused_add_cos_sin_0", t0 + 20, kernel_us, pid=0,
              correlation=corr, stream=7, device=0, **{"External id": ext})]


def test_a_compiled_cuda_trace_is_read_with_its_kernels_as_ops(tmp_path):
    # three calls 100 us apart, each one 90 us kernel over 12 MiB: memory-bound (before:
    # "has no operator events (cpu_op) inside its profiled steps")
    events = [e for i in range(3) for e in _compiled_step(1000 + 100 * i, 10 + i, 50 + i, 90)]
    p = tmp_path / "compiled.json"
    p.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [
        {"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0}],
        "traceEvents": events}))
    r = analyze([p])
    assert r.workload["trace"]["steps"] == 3
    assert r.workload["trace"]["step_rule"] == "repeated calls"
    (rec,) = r.counts.records
    assert (rec.op, rec.op_class, rec.bytes) == ("triton_poi_fused_add_cos_sin_0",
                                                 "pointwise", 3 * 4 * MIB)
    assert r.budget.busy_s == pytest.approx(90 * US)
    assert r.regime == "memory"
    check = {c["item"]: c for c in r.workload["trace"]["check"]}
    assert check["graphs and compiled code"]["detail"].startswith(
        "1 Inductor kernel call(s) per step, counted by their names")
    assert check["kernel links"]["ok"]


def test_a_compiled_cpu_trace_is_one_line(tmp_path):
    fn = torch.compile(lambda t: (t.sin() * 2 + 1).relu())
    t = torch.randn(256, 256)
    fn(t)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as prof:
        for _ in range(3):
            fn(t)
    p = tmp_path / "cpu_compiled.json"
    prof.export_chrome_trace(str(p))
    r = CliRunner().invoke(cli, ["analyze", str(p), "-q"])
    assert r.exit_code == 2
    assert "its work is torch.compile graphs, whose Inductor C++ kernels a CPU trace does " \
           "not record" in r.stderr

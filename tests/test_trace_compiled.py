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


def test_an_inductor_kernel_is_charged_only_the_elements_it_computes():
    # compiled GPT-2's first kernel on the H200 (8 x 512 tokens): embedding + position +
    # layer norm, its sizes xnumel 4096 and r0_numel 768 after its buffers. Charged whole,
    # the 50257 x 768 table made it 170 MB in 12.5 us: 13.6 TB/s against a 4.2 TB/s roof
    k = count_recorded("triton_red_fused_add_arange_embedding_native_layer_norm_0",
                       RecordedArgs([[8, 512], [50257, 768], [1024, 768], [768], [768],
                                     [8, 512, 768], [], []],
                                    ["long int", "float", "float", "float", "float",
                                     "float", "Scalar", "Scalar"],
                                    None, ["", "", "", "", "", "", "4096", "768"]))
    n = 4096 * 768  # the elements it computes
    # ids 4096 x 8 B; the table and wpe each at most n fp32 (wpe is 1024 x 768, less);
    # the norm's weight and bias; the output
    assert k.bytes == 4096 * 8 + n * 4 + 1024 * 768 * 4 + 2 * 768 * 4 + n * 4
    assert k.op_class == "reduction"
    # no sizes recorded (or a 0 among them): every argument whole, as before
    whole = count_recorded("triton_poi_fused_add_0", RecordedArgs(
        [[1024], [4096], []], ["float", "float", "Scalar"], None, ["", "", "0"]))
    assert whole.bytes == (1024 + 4096) * 4


def test_inductor_kernels_are_classed_by_their_kind_not_the_ops_they_fused():
    from gobrrr.profile import is_compute_kernel
    from gobrrr.recorded import op_class_by_name

    # a bias add + GELU after an extern addmm, a qkv split before attention, a batch
    # norm + ReLU after an extern convolution: pointwise kernels, no math of a matmul
    for name in ("triton_poi_fused_add_addmm_mul_pow_tanh_view_5",
                 "triton_poi_fused__scaled_dot_product_efficient_attention_0",
                 "triton_poi_fused_convolution_relu_3"):
        assert op_class_by_name(name) == "pointwise" and not is_compute_kernel(name)
    assert op_class_by_name("triton_per_fused_add_addmm_native_layer_norm_7") == "reduction"
    assert op_class_by_name("triton_tem_fused_mm_0") == "matmul"
    assert is_compute_kernel("triton_tem_fused_mm_0")  # a template GEMM is math


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

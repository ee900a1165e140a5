"""The workload's own GEMM shapes timed per format (gemm_probe.py) and the precision
predictions that read them (remedies/precision.py): exact arithmetic, a fake timer."""

import pytest
import torch

from gobrrr.budget import Budget, CallRow
from gobrrr.counting import count
from gobrrr.gemm_probe import GemmShape, GemmTimes, probe_gemms, shape_of, shapes_by_flops
from gobrrr.verdict import remedies_for


def test_a_gemm_shape_is_read_back_from_its_output_and_flops():
    assert shape_of("aten::mm", (4096, 768), 2 * 4096 * 768 * 3072) == \
        GemmShape(1, 4096, 768, 3072)
    assert shape_of("aten::bmm", (384, 128, 64), 2 * 384 * 128 * 64 * 128) == \
        GemmShape(384, 128, 64, 128)
    assert shape_of("aten::addmm", (8, 16), 2 * 8 * 16 * 32) == GemmShape(1, 8, 16, 32)
    assert shape_of("aten::mul", (8, 16), 128) is None  # not a GEMM
    assert shape_of("aten::mm", (8, 16), 2 * 8 * 16 * 32 + 1) is None  # no whole K
    assert shape_of("aten::mm", (2, 8, 16, 4), 10) is None


def test_shapes_come_most_flops_first_and_only_fp32():
    x, w = torch.randn(64, 32), torch.randn(32, 16)
    y, v = torch.randn(8, 32), torch.randn(32, 128)
    counts = count(lambda: (x @ w, x @ w, y @ v, x.bfloat16() @ w.bfloat16()))
    # 64x16x32 twice (2 x 65536 FLOPs) before 8x128x32 (65536); the bf16 one left out
    assert shapes_by_flops(counts.records) == [GemmShape(1, 64, 16, 32),
                                               GemmShape(1, 8, 128, 32)]
    assert shapes_by_flops(counts.records, limit=1) == [GemmShape(1, 64, 16, 32)]
    got = probe_gemms([GemmShape(1, 64, 16, 32)],
                      timer=lambda s, fmt: {"fp32": 4e-6, "tf32": 2e-6, "bf16": 1e-6}[fmt])
    assert got == [GemmTimes(GemmShape(1, 64, 16, 32), 4e-6, 2e-6, 1e-6)]
    assert got[0].ratio("tf32") == 0.5 and got[0].ratio("bf16") == 0.25


def test_precision_predictions_take_the_shapes_measured_ratio(round_cuda_ceilings):
    # one fp32 mm of 90 us (10 us idle): at the peaks' ratios TF32 (7x) saves 77.1 us,
    # 100 / 22.9 = 4.38x; bf16 (14x) 100 / 16.4 = 6.09x. Timed at its shape TF32 ran 2x
    # and bf16 4x faster: 100 / (10 + 45) = 1.82x and 100 / (10 + 22.5) = 3.08x
    x, w = torch.randn(64, 32), torch.randn(32, 16)
    counts = count(lambda: x @ w)
    rec = counts.records[0]
    b = Budget(wall_s=100e-6, busy_s=90e-6, overhead_s=10e-6, memory_s=0.0,
               compute_s=90e-6, floor_s=0.0, below_roof_s=0.0,
               compute_s_by_unit={"fp32": 90e-6},
               per_call=[CallRow(rec.index, rec.op, rec.module, rec.phase, rec.op_class,
                                 "compute", 90e-6, rec.flops, rec.bytes, 0.0)])
    r = {x.name: x for x in remedies_for(b, counts, round_cuda_ceilings, "cuda", None, None)}
    assert r["TF32 matmuls"].predicted_speedup == pytest.approx(100 / (100 - 90 * 6 / 7))
    # + autocast's casts of x and w: (8192 + 2048) x 1.5 B at 1 TB/s = 0.01536 us
    assert r["bf16 autocast"].predicted_speedup == pytest.approx(
        100 / (100 - 90 * 13 / 14 + 0.01536))
    b.gemm_times = [GemmTimes(GemmShape(1, 64, 16, 32), 4e-6, 2e-6, 1e-6)]
    r = {x.name: x for x in remedies_for(b, counts, round_cuda_ceilings, "cuda", None, None)}
    assert r["TF32 matmuls"].predicted_speedup == pytest.approx(100 / 55)
    assert r["bf16 autocast"].predicted_speedup == pytest.approx(100 / (32.5 + 0.01536))
    assert r["TF32 matmuls"].basis == ("fp32 matmul time 90 us: 90 us of it in 1 GEMM "
                                       "shape(s) timed here in tf32: 2.0x faster")


@pytest.mark.cuda
def test_on_cuda_a_large_gemm_runs_faster_in_bf16_than_fp32():
    # 4096^3: every format near its peak, bf16 several times fp32's rate on any tensor-
    # core GPU (the H200: ~14x by the peaks); the margin 2x is far below that
    got = probe_gemms([GemmShape(1, 4096, 4096, 4096)])[0]
    assert got.ratio("bf16") < 0.5 and got.ratio("tf32") < 1.0


def test_an_unaligned_shape_is_also_timed_padded_as_inductor_pads_it():
    asked = []

    def timer(s: GemmShape, fmt: str) -> float:
        asked.append((s, fmt))
        return {"fp32": 8e-6, "tf32": 6e-6, "bf16": 4e-6}[fmt] / (2 if s.n % 8 == 0 else 1)

    got = probe_gemms([GemmShape(1, 64, 50257, 30), GemmShape(1, 64, 16, 32)], timer)
    # bf16 pads to 8 elements, TF32 to 4 (16 bytes); the aligned shape is timed once
    assert (GemmShape(1, 64, 50264, 32), "bf16") in asked
    assert (GemmShape(1, 64, 50260, 32), "tf32") in asked
    assert len(asked) == 5 + 3
    assert got[0].bf16_padded_s == 2e-6 and got[0].tf32_padded_s == 6e-6
    assert got[1].bf16_padded_s is None and got[1].tf32_padded_s is None
    # eager runs the shape as it is; compiled, the faster of the two
    assert got[0].ratio("bf16") == 0.5 and got[0].ratio("bf16", compiled=True) == 0.25
    assert got[1].ratio("bf16", compiled=True) == got[1].ratio("bf16")


def test_a_stack_that_compiles_credits_the_padded_gemm(round_cuda_ceilings):
    # one fp32 mm of 90 us (10 us idle) of an unaligned shape: bf16 in eager 4x faster
    # (100 / (10 + 22.5) = 3.08x); padded, as torch.compile runs it, 8x (100 / 21.25)
    from gobrrr.gains import combine
    from gobrrr.remedies.base import Context
    from gobrrr.remedies.catalog import predictions

    x, w = torch.randn(64, 30), torch.randn(30, 17)
    counts = count(lambda: x @ w)
    rec = counts.records[0]
    shape = shape_of(rec.op, rec.out_shape, rec.flops)
    assert shape == GemmShape(1, 64, 17, 30)
    b = Budget(wall_s=100e-6, busy_s=90e-6, overhead_s=10e-6, memory_s=0.0,
               compute_s=90e-6, floor_s=0.0, below_roof_s=0.0,
               compute_s_by_unit={"fp32": 90e-6},
               per_call=[CallRow(rec.index, rec.op, rec.module, rec.phase, rec.op_class,
                                 "compute", 90e-6, rec.flops, rec.bytes, 0.0)],
               gemm_times=[GemmTimes(shape, 4e-6, 2e-6, 1e-6, 2e-6, 0.5e-6)])
    ctx = Context("cuda", b, round_cuda_ceilings, counts.records, module_types={"Linear"})
    gains = {spec.name: gain for spec, gain in predictions(ctx)}
    auto = gains["bf16_autocast"]
    # in eager, autocast's casts of x and w too: (7680 + 2040) x 1.5 B at 1 TB/s
    assert auto.speedup == pytest.approx(100 / (32.5 + 0.01458))
    assert auto.under_compile is not None
    assert auto.under_compile.speedup == pytest.approx(100 / 21.25)
    assert "padded, as torch.compile pads them" in auto.under_compile.basis
    assert gains["tf32"].under_compile is None  # padded TF32 was no faster here
    # a stack that compiles takes the padded gain; one that does not, the eager one
    assert combine(b, [auto], compiled=True).speedup == pytest.approx(100 / 21.25)
    assert combine(b, [auto], compiled=False).speedup == pytest.approx(100 / (32.5 + 0.01458))


@pytest.mark.cuda
def test_on_cuda_gpt2s_unaligned_lm_head_runs_faster_padded_in_bf16():
    # N = 50257 (GPT-2's vocabulary): on the H200 2.49 ms as it is, 0.48 ms padded to
    # 50264 (session-2026-12-04m/probe); the unaligned kernels' penalty on tensor cores,
    # asserted only as padded < unaligned
    got = probe_gemms([GemmShape(1, 4096, 50257, 768)])[0]
    assert got.bf16_padded_s is not None and got.bf16_padded_s < got.bf16_s

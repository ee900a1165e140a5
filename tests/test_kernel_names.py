"""Kernels read by their names (profile.is_math_kernel, is_compute_kernel): a GEMV is a
matmul's own kernel but memory-bound, so a kernel with no op to count it by (a CUDA
graph's replay in a trace) is compute-bound by its name only when it is not a GEMV."""

import pytest
import torch

from gobrrr.budget import compute_budget
from gobrrr.counting import count
from gobrrr.hardware import Ceilings
from gobrrr.profile import is_compute_kernel, is_math_kernel
from gobrrr.run import Kernel, ProfiledRun

US = 1e-6
# cuBLAS's batch-1 fp32 matmul kernel, as the H200 named it (tests/data/traces/mlp_b1_forward)
GEMVX = ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, "
         "float, float, float, false, true, true, false, 7, false, cublasGemvParamsEx<...>>")


@pytest.mark.parametrize("name, math, compute", [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", True, True),
    ("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NNT", True, True),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", True, True),
    (GEMVX, True, False),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4>", True,
     False),
    ("cublasLt::splitKreduce_kernel", False, False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>", False,
     False),
])
def test_which_kernels_are_math_and_which_count_as_compute(name, math, compute):
    assert is_math_kernel(name) is math and is_compute_kernel(name) is compute


def test_kernels_outside_any_op_count_as_compute_only_when_they_are_not_gemvs():
    ceil = Ceilings(device="cuda", fingerprint={"device": "cuda", "torch": "t",
                                                "python": "3", "name": "test"},
                    peak_flops_per_s={"fp32": 1e12}, bandwidth_bytes_per_s=1e10,
                    op_overhead_s=5 * US, python_ops_per_s=1e7, measured_at="t",
                    calibrate_s=0.0)
    x = torch.randn(1024)
    counts = count(lambda: x * 2)
    # the op's own kernel 52.4288 us (its floor: 2 x 4 KiB... at 1e10 B/s is 0.8 us, so
    # memory), then two replayed kernels with no op: a GEMM 30 us and a GEMV 20 us
    run = ProfiledRun(counts=counts, device="cuda", op_time_s={},
                      kernels=[Kernel("k0", 10 * US, 0),
                               Kernel("sm90_xmma_gemm_f32f32", 30 * US, None),
                               Kernel(GEMVX, 20 * US, None)])
    run.tally_kernels()
    b = compute_budget(run, 60 * US, ceil)
    assert b.compute_s == pytest.approx(30 * US)  # the GEMM only
    assert b.memory_s == pytest.approx(30 * US)  # the op's 10 us and the GEMV's 20
    assert any("30.0 us of them GEMM, convolution or attention kernels by their names, "
               "counted as compute-bound, the rest (GEMVs included) as memory-bound" in n
               for n in b.notes)

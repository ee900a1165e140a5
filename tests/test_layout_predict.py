"""channels_last's prediction (remedies/layout.py): only cuDNN's layout transposes inside
the conv ops disappear, found by kernel name; without kernels, all the conv ops'
memory-bound time. Exact arithmetic on a hand-built budget."""

import pytest

from gobrrr.budget import Budget, CallRow, KernelRow, RowBudget
from gobrrr.remedies.base import Context
from gobrrr.remedies.catalog import predictions
from gobrrr.remedies.layout import transpose_share


def _budget(kernels: list[KernelRow]) -> Budget:
    # 100 us a call: one conv op of 60 us (20 compute, 40 memory-bound kernels), 40 us
    # of other memory-bound time
    conv = RowBudget("aten::convolution", calls=1, time_s=60e-6, compute_s=20e-6,
                     memory_s=40e-6)
    return Budget(wall_s=100e-6, busy_s=100e-6, overhead_s=0.0, memory_s=80e-6,
                  compute_s=20e-6, floor_s=0.0, below_roof_s=0.0, per_op=[conv],
                  per_call=[CallRow(0, "aten::convolution", "conv1", "forward", "conv",
                                    "compute", 60e-6, 1, 1, 0.0),
                            CallRow(1, "aten::relu_", "relu", "forward", "pointwise",
                                    "memory", 40e-6, 1, 1, 0.0)],
                  kernels=kernels)


def _k(name: str, op: int | None, us: float, regime: str = "memory") -> KernelRow:
    return KernelRow(name, op, None, us * 1e-6, regime)


KERNELS = [
    _k("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float>(...)", 0, 10),
    _k("void cudnn::engines_precompiled::nhwcToNchwKernel<float, float>(...)", 0, 5),
    _k("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", 0, 25),  # 1x1 conv
    _k("sm90_xmma_fprop_implicit_gemm_tf32f32", 0, 20, "compute"),
    _k("void at::native::vectorized_elementwise_kernel<4, relu>", 1, 40),
]


def _predict(b: Budget):
    ctx = Context("cuda", b, None, [], module_types={"Conv2d"})
    return {spec.name: gain for spec, gain in predictions(ctx)}["channels_last"]


def test_only_the_layout_transposes_in_the_conv_ops_are_credited():
    # of the conv's 40 us of memory-bound kernels, 15 are transposes: 100 / 85
    assert transpose_share(KERNELS, {0}) == pytest.approx(15 / 40)
    gain = _predict(_budget(KERNELS))
    assert gain.speedup == pytest.approx(100 / 85)
    assert gain.basis == ("15 us of layout-transpose kernels inside conv ops disappear "
                          "(the other 25 us of memory-bound conv kernels stay)")


def test_without_kernels_all_memory_bound_conv_time_is_credited():
    assert transpose_share([], {0}) is None
    assert _predict(_budget([])).speedup == pytest.approx(100 / 60)


def test_conv_ops_without_a_transpose_predict_nothing():
    kernels = [k for k in KERNELS if "Nhwc" not in k.name and "Nchw" not in k.name]
    assert transpose_share(kernels, {0}) == 0.0
    with pytest.raises(KeyError):  # no gain: channels_last is not among the predictions
        _predict(_budget(kernels))

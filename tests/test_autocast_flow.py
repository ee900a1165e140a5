"""What bf16 autocast would change in a counted fp32 call (remedies/autocast_flow.py), and
the autocast prediction built on it (remedies/precision.py): exact numbers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gobrrr.budget import Budget, CallRow
from gobrrr.counting import count
from gobrrr.gains import Gain, combine
from gobrrr.remedies.autocast_flow import autocast_flow
from gobrrr.remedies.base import Context, workload_facts
from gobrrr.remedies.catalog import ALL, predictions


def _block():
    torch.manual_seed(0)
    ln, fc, proj = nn.LayerNorm(8), nn.Linear(8, 16), nn.Linear(16, 8)
    x = torch.randn(4, 8)

    def step():
        with torch.no_grad():
            h = torch.relu(fc(ln(x)))  # a norm (fp32), a matmul (bf16), relu of bf16
            return x + proj(h)  # the fp32 residual joins: the add stays fp32

    return step, [ln, fc, proj]


def test_a_norm_then_two_matmuls_cast_the_fp32_inputs_and_halve_the_op_between():
    step, modules = _block()
    records = count(step).records
    ops = [r.op.rpartition("::")[2] for r in records]
    assert ops == ["native_layer_norm", "t", "addmm", "relu", "t", "addmm", "add"]
    flow = autocast_flow(records, workload_facts(modules, [])["param_storages"])
    # fc: the norm's fp32 output (4x8), its weight (16x8) and bias (16); proj: its weight
    # (8x16) and bias (8), its input already bf16. Each cast reads 4 B and writes 2 B an
    # element: 1.5 x the fp32 bytes
    assert flow.cast_bytes == (64 * 3 // 2, 128 * 3 // 2, 512 * 3 // 2,
                               32 * 3 // 2, 512 * 3 // 2)
    assert flow.casts == 5
    assert flow.low == {2, 5}
    assert flow.halved == {3}  # relu; the residual add reads the fp32 x


def test_a_parameter_is_cast_once_per_call_an_activation_at_each_use():
    torch.manual_seed(0)
    lin = nn.Linear(8, 8, bias=False)
    x = torch.randn(4, 8)

    def twice():
        with torch.no_grad():
            return lin(x) + lin(x)  # x is not a parameter: cast at each use

    records = count(twice).records
    params = workload_facts([lin], [])["param_storages"]
    assert autocast_flow(records, params).casts == 3  # the weight once, x twice
    # without the parameters known, the weight counts as an input: cast at each use
    assert autocast_flow(records).casts == 4


def test_an_fp32_op_casts_its_bf16_input_up_and_an_in_place_op_keeps_the_dtype():
    torch.manual_seed(0)
    fc = nn.Linear(8, 16, bias=False)
    x = torch.randn(4, 8)

    def step():
        with torch.no_grad():
            h = fc(x)
            h.relu_()  # in place on the bf16 output: stays bf16, halved
            return torch.softmax(h, -1)  # softmax runs in fp32: h (4x16) cast up

    records = count(step).records
    assert [r.op.rpartition("::")[2] for r in records] == ["t", "mm", "relu_", "_softmax"]
    flow = autocast_flow(records, workload_facts([fc], [])["param_storages"])
    # x (128 B) and the weight (512 B) cast down; h (256 B in fp32) read as bf16 (128 B)
    # and written as fp32 (256 B) by the cast up
    assert flow.cast_bytes == (128 * 3 // 2, 512 * 3 // 2, 128 + 256)
    assert flow.halved == {2}


def _row_of(records):
    """A budget row of the counted op `i`: its regime and time as given."""
    def row(i: int, regime: str, time_s: float) -> CallRow:
        r = records[i]
        return CallRow(i, r.op, r.module, r.phase, r.op_class, regime, time_s, r.flops,
                       r.bytes, 0.0)
    return row


def test_the_autocast_prediction_counts_the_casts_kernels_and_their_dispatch(
        round_cuda_ceilings):
    step, modules = _block()
    records = count(step).records
    row = _row_of(records)

    # 100 us a call: the two fp32 matmuls 30 us each, the norm 5, relu 10, the add 5, 20
    # of GPU idle; the host issues a call in 50 us (measured)
    b = Budget(wall_s=100e-6, busy_s=80e-6, overhead_s=20e-6, memory_s=20e-6,
               compute_s=60e-6, floor_s=0.0, below_roof_s=0.0,
               compute_s_by_unit={"fp32": 60e-6}, host_issue_s=50e-6,
               per_call=[row(0, "memory", 5e-6), row(2, "compute", 30e-6),
                         row(3, "memory", 10e-6), row(5, "compute", 30e-6),
                         row(6, "memory", 5e-6)])
    ctx = Context("cuda", b, round_cuda_ceilings, records,
                  **workload_facts(modules, []))
    gain = dict((s.name, g) for s, g in predictions(ctx))["bf16_autocast"]
    # compute: 60 us at 700/50 = 14x saves 55.714 us; memory: relu's bytes halved (in
    # eager only the part of its 10 us they take at the measured bandwidth: a few ns of
    # this tiny block), the 5 casts take 5 us each (their bytes need far less: the
    # shortest memory-bound op, 5 us, is the least a kernel takes here): about -25 us;
    # host: 50 us + 5 casts x 5 us
    relu_bytes_s = records[3].bytes / round_cuda_ceilings.bandwidth_bytes_per_s
    assert 0 < relu_bytes_s < 1e-7
    assert gain.saved_s["compute"] == pytest.approx(60e-6 * 13 / 14)
    assert gain.saved_s["memory"] == pytest.approx(relu_bytes_s / 2 - 25e-6)
    assert gain.host_added_s == pytest.approx(25e-6)
    # T - saved = 100 - 55.714 + 25 = 69.286 us, under the host's floor: the GPU's
    # 80 - 30.714 = 49.286 us left overlapped with the 75 us of issue,
    # sqrt(49.286^2 + 75^2) = 89.74 us (the call as measured: sqrt(80^2 + 50^2) = 94.3
    # us, under its 100, so no scaling)
    left_us = 80 - (60 * 13 / 14 - 25 + relu_bytes_s / 2 * 1e6)
    assert gain.speedup == pytest.approx(100 / (left_us ** 2 + 75 ** 2) ** 0.5)
    assert "5 cast(s) autocast adds" in gain.basis
    assert "1 memory-bound op(s) with every input in bf16" in gain.basis
    assert "of it their bytes at the measured bandwidth, halved" in gain.basis
    # under torch.compile the casts fuse away: the matmul time and relu's halving
    assert gain.under_compile is not None
    assert gain.under_compile.saved_s == pytest.approx({"compute": 60e-6 * 13 / 14,
                                                        "memory": 5e-6})
    assert "(the casts fused into their neighbours)" in gain.under_compile.basis
    assert gain.under_compile.host_added_s == 0.0
    # a CUDA-graph replay issues the casts too: a stack with one adds no host work
    replay = Gain(1.25, "replay", {"overhead": 20e-6}, host_left_s=5e-6)
    assert combine(b, [gain, replay]).host_added_s == 0.0
    assert combine(b, [gain]).host_added_s == pytest.approx(25e-6)
    assert combine(b, [gain]).speedup == pytest.approx(gain.speedup)


def test_batch_norm_keeps_its_inputs_bf16_beside_fp32_weights():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    x = torch.randn(2, 3, 8, 8)

    def step():
        with torch.no_grad():
            return m(x)

    records = count(step).records
    ops = [r.op.rpartition("::")[2] for r in records]
    assert ops == ["convolution", "empty", "native_batch_norm", "relu"]
    flow = autocast_flow(records, workload_facts([m], [])["param_storages"])
    # the image (1536 B), the conv's weight (432 B) and bias (16 B) cast; the norm reads
    # the conv's bf16 output beside its fp32 weight, bias and statistics, and writes bf16
    assert flow.cast_bytes == (1536 * 3 // 2, 432 * 3 // 2, 16 * 3 // 2)
    assert flow.halved == {2, 3}


def test_under_a_compile_autocast_still_halves_what_fusion_leaves(round_cuda_ceilings):
    """A memory-bound call: the compile's fusion and autocast's halving each take their
    share of the memory time (session ae: ResNet-50 b256's compiled autocast stack was
    predicted below the same stack without the compile, the halving dropped)."""
    step, modules = _block()
    records = count(step).records
    row = _row_of(records)

    # 100 us: the two fp32 matmuls 10 us each, the norm 5, relu 60, the add 10, 5 idle;
    # no issue time measured (no host floor)
    b = Budget(wall_s=100e-6, busy_s=95e-6, overhead_s=5e-6, memory_s=75e-6,
               compute_s=20e-6, floor_s=0.0, below_roof_s=0.0,
               compute_s_by_unit={"fp32": 20e-6},
               per_call=[row(0, "memory", 5e-6), row(2, "compute", 10e-6),
                         row(3, "memory", 60e-6), row(5, "compute", 10e-6),
                         row(6, "memory", 10e-6)])
    ctx = Context("cuda", b, round_cuda_ceilings, records,
                  **workload_facts(modules, []))
    # the spec's own prediction: in eager the casts cost more than relu's few bytes save
    # (not listed), under a compile they fuse away
    gain = next(s for s in ALL if s.name == "bf16_autocast").predict(ctx)
    assert gain.under_compile is not None
    # compute: 20 us at 14x saves 18.571 us; relu's 60 us halved saves 30 us (under a
    # compile all of it: Inductor's kernels move what fusion leaves near the roof)
    assert gain.under_compile.saved_s == pytest.approx({"compute": 20e-6 * 13 / 14,
                                                        "memory": 30e-6})
    fusion = Gain(100 / 80, "fusion", {"memory": 20e-6})
    stacked = combine(b, [gain, fusion], compiled=True)
    # memory: 75 us x (1 - 30/75) x (1 - 20/75) = 33 us left, 42 us saved
    saved_us = 20 * 13 / 14 + 42
    assert stacked.speedup == pytest.approx(100 / (100 - saved_us))
    assert stacked.speedup > combine(b, [gain], compiled=True).speedup
    assert combine(b, [gain]).speedup is None  # eager: the casts cost more than saved


def test_only_the_part_of_a_memory_bound_call_its_bytes_take_halves():
    """Eager bf16 halves the part of a memory-bound call's time its bytes take at the
    measured bandwidth; a small kernel's latency stays (ResNet-50 b1 on an H100: 777 us
    of memory-bound kernels, 137 us of it bytes; its bf16 replay measured slower)."""
    from gobrrr.remedies.precision import bytes_bound_s

    def row(time_s: float, nbytes: int) -> CallRow:
        return CallRow(0, "aten::relu", "", "forward", "pointwise", "memory", time_s, 0,
                       nbytes, 0.0)

    tb_per_s = 1e12
    assert bytes_bound_s(row(10e-6, 1_000_000), tb_per_s) == pytest.approx(1e-6)
    assert bytes_bound_s(row(10e-6, 50_000_000), tb_per_s) == 10e-6  # at most its time
    assert bytes_bound_s(row(10e-6, 0), tb_per_s) == 10e-6  # bytes unknown: all of it


def test_a_cast_halves_in_eager_the_part_its_bytes_take_and_under_a_compile_all(
        round_cuda_ceilings):
    """The bf16 cast: a memory-bound fp32 norm of 10 us whose bytes take 4 us at the
    measured bandwidth saves 2 us in eager (its latency stays) and 5 us under a compile
    (Inductor's kernel moves what is left near the roof)."""
    from dataclasses import replace

    step, modules = _block()
    records = count(step).records
    row = _row_of(records)
    ceilings = replace(round_cuda_ceilings,
                       bandwidth_bytes_per_s=records[0].bytes / 4e-6)
    b = Budget(wall_s=100e-6, busy_s=100e-6, overhead_s=0.0, memory_s=10e-6,
               compute_s=90e-6, floor_s=0.0, below_roof_s=0.0,
               per_call=[row(0, "memory", 10e-6), row(2, "compute", 45e-6),
                         row(5, "compute", 45e-6)])
    ctx = Context("cuda", b, ceilings, records, **workload_facts(modules, []))
    gain = next(s for s in ALL if s.name == "bf16_cast").predict(ctx)
    assert gain.saved_s == pytest.approx({"memory": 2e-6})
    assert gain.speedup == pytest.approx(100 / 98)
    assert "memory-bound fp32 time 10 us, 4 us of it its bytes at the measured " \
           "bandwidth, halved" in gain.basis
    assert gain.under_compile is not None
    assert gain.under_compile.saved_s == pytest.approx({"memory": 5e-6})

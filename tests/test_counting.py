"""Exact FLOP and byte counts, with the arithmetic in comments."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gobrrr.counting import MATMUL_CLASSES, count

FP32 = 4  # bytes per fp32 element


def test_relu_of_matmul_issue_example():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    r = count(lambda: torch.relu(a @ b))
    # mm: 2*M*N*K = 2*64*16*32 = 65536; relu: 1 per output element = 64*16 = 1024
    assert r.total_flops == 65536 + 1024
    # mm reads a, b and writes c; relu reads c and writes its output.
    assert r.total_bytes == FP32 * (64 * 32 + 32 * 16 + 64 * 16 + 2 * 64 * 16)
    assert [x.op for x in r.records] == ["aten::mm", "aten::relu"]
    assert r.records[0].op_class == "matmul" and r.records[0].tensor_core_unit == "fp32"
    assert r.uncounted_ops == []


def test_conv2d():
    x, w, bias = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    r = count(lambda: F.conv2d(x, w, bias))
    (rec,) = [x for x in r.records if x.op_class == "conv"]
    # out 1x4x6x6; flop_counter: 2 * batch * prod(w) * prod(out spatial)
    # = 2 * 1 * (4*3*3*3) * (6*6) = 2 * 108 * 36 = 7776 (bias adds not counted)
    assert rec.flops == 7776
    # reads x (192) + w (108) + bias (4), writes out (144) elements
    assert rec.bytes == FP32 * (192 + 108 + 4 + 144)


def test_softmax():
    x = torch.randn(4, 10)
    r = count(lambda: torch.softmax(x, dim=-1))
    (rec,) = r.records
    # max, subtract, exp, sum, divide: 5 per element * 40 = 200
    assert rec.op == "aten::_softmax" and rec.flops == 200
    assert rec.bytes == FP32 * (40 + 40)


def test_safe_softmax_is_a_softmax():
    # the attention math path's softmax (fully masked rows give 0, not NaN)
    x = torch.randn(4, 10)
    r = count(lambda: torch.ops.aten._safe_softmax(x, -1))
    (rec,) = r.records
    assert rec.op == "aten::_safe_softmax" and rec.op_class == "softmax"
    assert rec.flops == 200 and rec.has_formula  # 5 per element, as _softmax
    assert rec.bytes == FP32 * (40 + 40)


def test_layer_norm_with_and_without_affine():
    x = torch.randn(4, 10)
    ln = nn.LayerNorm(10)
    r = count(ln, x)
    (rec,) = [x for x in r.records if x.op_class == "norm"]
    # fvcore's convention: 5 per element with affine: 5 * 40 = 200
    assert rec.flops == 200
    # reads x (40) + weight (10) + bias (10); writes out (40) + mean (4) + rstd (4)
    assert rec.bytes == FP32 * (40 + 10 + 10 + 40 + 4 + 4)
    assert rec.module == "LayerNorm"
    r2 = count(lambda: F.layer_norm(x, (10,)))
    (rec2,) = [x for x in r2.records if x.op_class == "norm"]
    assert rec2.flops == 4 * 40  # no affine: 4 per element


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def test_mlp_forward_backward():
    m, x = _mlp(), torch.randn(5, 8)
    r = count(lambda: m(x).sum().backward())
    fwd = sum(x.flops for x in r.records if x.phase == "forward")
    bwd = sum(x.flops for x in r.records if x.phase == "backward")
    # forward: addmm 2*5*8*16 = 1280; relu 5*16 = 80; addmm 2*5*16*4 = 640; sum 5*4 = 20
    assert fwd == 1280 + 80 + 640 + 20
    # backward: grad input of layer 2: mm 2*5*4*16 = 640; grad W2: mm 2*4*5*16 = 640;
    # grad b2: sum over 5x4 = 20; relu backward 80; grad W1: mm 2*16*5*8 = 1280;
    # grad b1: sum over 5x16 = 80. x needs no grad: no grad-input mm for layer 1.
    assert bwd == 640 + 640 + 20 + 80 + 1280 + 80
    mods = r.by_module()
    assert mods["Sequential.0"].flops == 1280 + 1280 + 80
    assert mods["Sequential.2"].flops == 640 + 640 + 640 + 20
    assert r.uncounted_ops == []
    # By op class: the three addmm/mm groups are matmul (1280 + 640 forward, 640 + 640 +
    # 1280 backward), relu and its backward pointwise (80 + 80), the sums reductions
    # (forward 20; backward grad-b 20 + 80).
    classes = r.by_class()
    assert classes["matmul"].flops == 1280 + 640 + 640 + 640 + 1280
    assert classes["pointwise"].flops == 80 + 80
    assert classes["reduction"].flops == 20 + 20 + 80


def test_adam_step():
    m, x = _mlp(), torch.randn(5, 8)
    opt = torch.optim.Adam(m.parameters(), foreach=False)
    m(x).sum().backward()
    r = count(opt.step)
    assert {x.phase for x in r.records} == {"optimizer"}
    assert {x.module for x in r.records} == {"optimizer.Adam"}
    # single-tensor Adam, per parameter element: lerp_ 3, mul_ 1, addcmul_ 2, sqrt 1,
    # div 1, add_ 1, addcdiv_ 2 = 11; plus one step += 1 per parameter tensor (4).
    # elements: 8*16 + 16 + 16*4 + 4 = 212 -> 11 * 212 + 4 = 2336
    assert r.total_flops == 11 * 212 + 4
    assert r.uncounted_ops == []


def test_views_and_inplace_bytes():
    x = torch.randn(100)
    r = count(lambda: x.view(10, 10).t().mul_(2))
    views = [x for x in r.records if x.op_class == "view"]
    assert views and all(v.bytes == 0 and v.flops == 0 for v in views)
    (mul,) = [x for x in r.records if x.op == "aten::mul_"]
    # in place: read x once, write x once = 2 * 100 * 4; the scalar 2 moves nothing
    assert mul.bytes == 2 * 100 * FP32 and mul.flops == 100


def test_broadcast_input_counts_distinct_elements():
    x, bias = torch.randn(64, 32), torch.randn(32)
    r = count(lambda: x + bias.expand(64, 32))
    (add,) = [x for x in r.records if x.op == "aten::add"]
    # reads x (2048) + bias's 32 distinct elements, writes 2048
    assert add.bytes == FP32 * (2048 + 32 + 2048)


def test_embedding_reads_only_gathered_rows():
    emb = nn.Embedding(1000, 16)
    idx = torch.tensor([[1, 2, 3]])
    r = count(emb, idx)
    (rec,) = [x for x in r.records if x.op == "aten::embedding"]
    # indices 3*8 bytes + 3 rows of 16 fp32 read + the same written
    assert rec.bytes == 3 * 8 + 2 * 3 * 16 * FP32
    assert rec.flops == 0


def test_unknown_op_is_listed_not_silently_zero():
    x = torch.randn(8, 8)
    r = count(lambda: torch.linalg.qr(x))
    assert any("qr" in name for name in r.uncounted_ops)


def test_bf16_matmul_is_tensor_core_eligible():
    a = torch.randn(16, 16, dtype=torch.bfloat16)
    r = count(lambda: a @ a)
    assert r.records[0].dtype == "bf16" and r.records[0].tensor_core_unit == "bf16"


@pytest.mark.cuda
def test_cuda_counts_match_cpu():
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
    r = count(lambda: torch.relu(a @ b))
    assert r.total_flops == 65536 + 1024
    assert r.total_bytes == FP32 * (64 * 32 + 32 * 16 + 64 * 16 + 2 * 64 * 16)


@pytest.mark.cuda
def test_cuda_adam_foreach_counts_every_element():
    m = _mlp().cuda()
    x = torch.randn(5, 8, device="cuda")
    opt = torch.optim.Adam(m.parameters(), foreach=True)
    m(x).sum().backward()
    r = count(opt.step)
    assert r.uncounted_ops == []
    assert r.total_flops >= 11 * 212  # the foreach path does at least the same math


def test_grouped_query_attention_counts_every_query_head():
    # 8 query heads sharing 2 key/value heads (LLaMA-style GQA): the work is that of 8
    # full heads, QK^T and PV: 2 x 2*B*H*L*S*E = 4*2*8*16*16*32 = 524288 FLOPs.
    q = torch.randn(2, 8, 16, 32)
    kv = torch.randn(2, 2, 16, 32)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    r = count(lambda: sdpa(q, kv.repeat_interleave(4, 1), kv.repeat_interleave(4, 1)))
    att = [x for x in r.records if x.op_class == "attention"]
    assert att and att[0].flops == 524288 and att[0].has_formula
    from gobrrr.counting import _gqa_expanded

    expanded = _gqa_expanded((q, kv, kv, 0.0))
    assert [tuple(a.shape) for a in expanded[:3]] == [(2, 8, 16, 32)] * 3
    assert expanded[1].device.type == "meta" and expanded[3] == 0.0


def test_inference_mode_counts_the_ops_a_composite_op_runs():
    # Under inference_mode aten::linear reaches the counting mode undecomposed; it was
    # counted as 0 FLOPs (a TinyLlama prefill lost every projection). 2 x 4 x 8 x 16 for
    # the matmul, whatever runs it (addmm, or mm then add).
    lin = nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.inference_mode():
        r = count(lin, x)
    matmul = [rec for rec in r.records if rec.op_class == "matmul"]
    assert sum(rec.flops for rec in matmul) == 2 * 4 * 8 * 16
    assert "aten::linear" not in {rec.op for rec in r.records}
    with torch.no_grad():
        assert count(lin, x).total_flops == r.total_flops


def test_the_multi_head_attention_fast_path_counts_its_matmuls():
    # nn.MultiheadAttention in eval without grad runs one aten::_native_multi_head_attention
    # (torchvision's ViT does): its projections and attention matmuls, which torch has no
    # formula for, were counted as nothing (ViT-B/16 on the H200: 37% of its time read
    # as memory-bound). B=2, L=S=10, E=64: 4BLE^2 + 4BSE^2 + 4BLSE = 706,560 FLOPs, the
    # same as the decomposed path's matmuls (training mode leaves the fast path).
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(64, 4, batch_first=True)
    x = torch.randn(2, 10, 64)

    def attend(x):
        with torch.no_grad():
            return m(x, x, x, need_weights=False)[0]

    m.eval()
    fast = count(attend, x)
    assert [(r.op, r.op_class, r.flops, r.has_formula) for r in fast.records] == [
        ("aten::_native_multi_head_attention", "attention", 706_560, True)]
    m.train()  # the decomposed path: linear projections and attention matmuls
    slow = count(attend, x)
    assert "aten::_native_multi_head_attention" not in {r.op for r in slow.records}
    assert sum(r.flops for r in slow.records if r.op_class in MATMUL_CLASSES) == 706_560

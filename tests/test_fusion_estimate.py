"""The fusion estimate (fusion_estimate.py): exact bytes on counted ops and on hand-made
records, one test per rule of its docstring. Each rule's test fails on the rule set
without it."""

import torch

from gobrrr.counting import OpRecord, count
from gobrrr.fusion_estimate import fusable_bytes_saved, generated_bytes

N = 1024 * 4  # bytes of one tensor of the hand-made records


def _ops(*ops: tuple) -> list[OpRecord]:
    """Records from (op, class, phase, storages read, storages written (N bytes each, or
    (storage, bytes))); an op's bytes are what it reads and writes, N per storage read
    unless the storage was written with other bytes."""
    size: dict[int, int] = {}
    out = []
    for i, (op, cls, phase, reads, writes) in enumerate(ops):
        w = tuple(x if isinstance(x, tuple) else (x, N) for x in writes)
        read_sizes = tuple((p, size.get(p, N)) for p in reads)
        nbytes = sum(n for _, n in read_sizes) + sum(b for _, b in w)
        size.update(dict(w))
        out.append(OpRecord(index=i, op=op, module="m", phase=phase, op_class=cls,
                            dtype="fp32", flops=0, bytes=nbytes, tensor_core_unit=None,
                            has_formula=True, reads=tuple(reads), writes=w,
                            read_sizes=read_sizes))
    return out


def _native_dropout_step() -> list[OpRecord]:
    """CUDA's dropout in a training step: x = a GEMM's output; native_dropout writes its
    output and a boolean mask (N / 4); a residual add reads the output; the backward
    reads the mask."""
    return _ops(("aten::mm", "matmul", "forward", (7, 8), (1,)),
                ("aten::native_dropout", "copy", "forward", (1,), (2, (3, N // 4))),
                ("aten::add", "pointwise", "forward", (2, 11), (4,)),
                ("aten::mm", "matmul", "forward", (4, 8), (5,)),
                ("aten::mm", "matmul", "backward", (12, 8), (6,)),
                ("aten::native_dropout_backward", "pointwise", "backward", (6, 3), (9,)),
                ("aten::mm", "matmul", "backward", (9, 7), (10,)))


def test_fusion_estimate_cos_cos():
    x = torch.randn(1024)
    counts = count(lambda: x.cos().cos())
    saved, total = fusable_bytes_saved(counts.records)
    # unfused: read x, write t, read t, write y = 4 * 1024 * 4 bytes; fused: 2 * 1024 * 4
    assert total == 4 * 1024 * 4
    assert saved == 2 * 1024 * 4


def test_fusion_estimate_keeps_what_a_later_kernel_reads():
    # a = x + y; b = layer_norm(a); c = b @ w (a kernel of its own); d = a + c
    # a: LN reads it on chip (its read saved), but d reads it after the GEMM: written
    # b: the GEMM reads it: written and read; d: the call's output, so the GEMM's
    # accumulate (rule 8): its read of c and its write are the GEMM's write (2n)
    n = 64 * 64 * 4  # bytes of one [64, 64] fp32 tensor
    x, y, w = (torch.randn(64, 64) for _ in range(3))

    def block():
        a = x + y
        b = torch.nn.functional.layer_norm(a, (64,))
        return a + b @ w

    records = count(block).records
    saved, total = fusable_bytes_saved(records)
    assert [r.op_class for r in records] == ["pointwise", "norm", "matmul", "pointwise"]
    # add: 3n; layer_norm: reads a, writes b and its mean and rstd (64 each); add: 3n
    assert total == 3 * n + (2 * n + 2 * 64 * 4) + 3 * n
    assert saved == n + 2 * n  # LN's read of a; d's (the old rule: a's write and read)
    assert generated_bytes(records) == total - saved - n  # the GEMM reads a, not d


def test_fusion_estimate_reads_a_gemm_output_once_per_kernel():
    # m = x @ w; y = m * sigmoid(m): sigmoid and mul read m in one kernel: once
    n = 64 * 64 * 4
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    records = count(lambda: (lambda m: m * torch.sigmoid(m))(x @ w)).records
    saved, total = fusable_bytes_saved(records)
    assert total == 2 * n + 3 * n  # sigmoid: m -> s; mul: m, s -> y
    assert saved == n + 2 * n  # m's second read; s never written nor read back


def test_fusion_estimate_keeps_the_last_write_of_state():
    # an optimizer-like update of a parameter p in place, then a read of the new p:
    # p.mul_(0.9); p.add_(g); p * 2. Fused: read p and g, write p (state outlives the
    # call, as AdamW's moments do) and the product; the rest stays on chip
    n = 1024 * 4
    p, g = torch.randn(1024), torch.randn(1024)

    def update():
        p.mul_(0.9)
        p.add_(g)
        return p * 2

    saved, total = fusable_bytes_saved(count(update).records)
    assert total == 2 * n + 3 * n + 2 * n
    # mul_'s p: written and read back on chip (2n); add_'s p: read on chip (n), but
    # written (the old rule saved that write too: 4n)
    assert saved == 3 * n


def test_a_training_steps_parts_are_kernels_apart():
    # rule 1: the forward's reduction s = sum(x) and the backward's g = s * 2 run in two
    # graphs: s is written and read back (one kernel would have kept it on chip: 2 x s)
    s_bytes = 64
    records = _ops(("aten::sum", "reduction", "forward", (1,), ((2, s_bytes),)),
                   ("aten::mul", "pointwise", "backward", (2,), (3,)))
    saved, total = fusable_bytes_saved(records)
    assert total == (N + s_bytes) + (s_bytes + N)
    assert saved == 0


def test_a_tensor_read_by_two_ops_of_a_later_kernel_is_read_once():
    # rule 3: a = relu(x); b = a @ w (a barrier); c = a * b; d = a + c. The kernel of c
    # and d reads a once (2 reads in eager) and keeps c on chip
    records = _ops(("aten::relu", "pointwise", "forward", (1,), (2,)),
                   ("aten::mm", "matmul", "forward", (2, 3), (4,)),
                   ("aten::mul", "pointwise", "forward", (2, 4), (5,)),
                   ("aten::add", "pointwise", "forward", (2, 5), (6,)))
    saved, total = fusable_bytes_saved(records)
    assert total == 2 * N + 3 * N + 3 * N
    assert saved == N + 2 * N  # a's second read; c neither written nor read back


def test_the_backward_recomputes_pointwise_work_from_what_it_derives_from():
    # rule 4, a tanh-gated unit: m = x @ w; t = tanh(m); y = m * t; o = y @ w2. Backward:
    # gy = go @ w2'; g1 = tanh_backward(gy, t); gm = g1 * m; gm @ w'. The backward's
    # kernel reads m anyway, so t is recomputed there from m, and the forward never
    # writes t
    records = _ops(("aten::mm", "matmul", "forward", (1, 2), (10,)),
                   ("aten::tanh", "pointwise", "forward", (10,), (11,)),
                   ("aten::mul", "pointwise", "forward", (10, 11), (12,)),
                   ("aten::mm", "matmul", "forward", (12, 3), (13,)),
                   ("aten::mm", "matmul", "backward", (14, 3), (15,)),
                   ("aten::tanh_backward", "pointwise", "backward", (15, 11), (16,)),
                   ("aten::mul", "pointwise", "backward", (16, 10), (17,)),
                   ("aten::mm", "matmul", "backward", (17, 2), (18,)))
    saved, total = fusable_bytes_saved(records)
    assert total == 2 * N + 3 * N + 3 * N + 3 * N
    # t: its read by mul on chip, never written, its backward read gone (3N); g1 on
    # chip (2N); m read once by the forward's kernel (N). Without recompute: 4N
    assert saved == 6 * N


def test_the_language_model_loss_backward_fuses_into_the_log_softmax_backward():
    # rules 1 and 4 on counted ops: cross-entropy over logits (a leaf, as a GEMM's
    # output would be), then its backward. Inductor (GPT-2's loss): the forward reads
    # the logits, the backward reads them again and writes their gradient: 3 passes
    # of the logits, besides the targets and scalars
    rows, classes = 64, 1000
    logits = torch.randn(rows, classes, requires_grad=True)
    target = torch.randint(0, classes, (rows,))

    def step() -> None:
        torch.nn.functional.cross_entropy(logits, target).backward()

    records = count(step).records
    assert "aten::nll_loss_backward" in [r.op for r in records]
    big = rows * classes * 4
    small = generated_bytes(records) - 3 * big
    # what is left: the targets (int64) read by the loss and by its backward, and
    # scalars; before nll_loss_backward was fused: + 3 passes (and, without recompute,
    # the log-softmax's output written and read back: + 1)
    assert 0 <= small <= 3 * rows * 8 + 64


def test_a_training_batch_norm_reads_its_input_twice():
    # rule 5: x = conv(...); y, mean, invstd = batch_norm(x) (training: its statistics
    # written); z = relu(y); conv(z). Eager and compiled, the norm reads x twice; the
    # fused kernel: x twice, z written (y stays on chip)
    c = 16 * 4
    train = _ops(("aten::convolution", "conv", "forward", (1, 2), (10,)),
                 ("aten::native_batch_norm", "norm", "forward", (10, 3, 4),
                  (11, (12, c), (13, c))),
                 ("aten::relu", "pointwise", "forward", (11,), (14,)),
                 ("aten::convolution", "conv", "forward", (14, 5), (15,)))
    saved, total = fusable_bytes_saved(train)
    bn = 3 * N + (N + 2 * c)  # reads x, weight and bias (N each), writes y and statistics
    assert total == bn + 2 * N + 3 * N  # + relu + the norm's second read of its inputs
    assert saved == 2 * N  # y neither written nor read back; inputs read twice either way
    # in eval its statistics are empty: one pass
    evaluation = _ops(("aten::convolution", "conv", "forward", (1, 2), (10,)),
                      ("aten::native_batch_norm", "norm", "forward", (10, 3, 4),
                       (11, (12, 0), (13, 0))),
                      ("aten::relu", "pointwise", "forward", (11,), (14,)),
                      ("aten::convolution", "conv", "forward", (14, 5), (15,)))
    saved, total = fusable_bytes_saved(evaluation)
    assert total == (3 * N + N) + 2 * N
    assert saved == 2 * N


def test_a_long_elementwise_chain_is_walked_without_recursion():
    # 3000 forward pointwise ops in a chain (storages 10..3010), each value read by the
    # backward after a GEMM: the recompute walks the chain back to x, the chain's input
    chain = [("aten::mul", "pointwise", "forward", (10 + i,), (11 + i,)) for i in range(3000)]
    records = _ops(("aten::mm", "matmul", "forward", (1, 2), (10,)), *chain,
                   ("aten::mm", "matmul", "backward", (5000, 2), (5001,)),
                   ("aten::mul", "pointwise", "backward", (5001, 3010), (5002,)),
                   ("aten::mm", "matmul", "backward", (5002, 2), (5003,)))
    saved, total = fusable_bytes_saved(records)
    assert total == 3000 * 2 * N + 3 * N
    # the chain on chip, its end never written (recomputed from x = the GEMM's output,
    # which the backward reads in its place): 2N per link but the first's read of x
    assert saved == 3000 * 2 * N - N + N - N


def test_eager_dropouts_mask_is_drawn_in_the_kernel_and_kept_as_booleans():
    # rule 6, a CPU's dropout: the mask storage 2 filled by bernoulli_ (not read), scaled
    # in place by div_, then y = x * mask; the backward multiplies its gradient by the
    # mask. Inductor: the mask drawn in the kernel, written once as booleans (N / 4 for
    # fp32) and read back so by the backward
    records = _ops(("aten::mm", "matmul", "forward", (7, 8), (1,)),
                   ("aten::bernoulli_", "copy", "forward", (2,), (2,)),
                   ("aten::div_", "pointwise", "forward", (2,), (2,)),
                   ("aten::mul", "pointwise", "forward", (1, 2), (3,)),
                   ("aten::mm", "matmul", "forward", (3, 8), (4,)),
                   ("aten::mm", "matmul", "backward", (5, 8), (6,)),
                   ("aten::mul", "pointwise", "backward", (6, 2), (9,)),
                   ("aten::mm", "matmul", "backward", (9, 7), (10,)))
    saved, total = fusable_bytes_saved(records)
    assert total == 2 * N + 2 * N + 3 * N + 3 * N
    # left: x read and y written (2N), the gradient read and written (2N), the mask
    # written and read back as booleans (N / 4 each)
    assert total - saved == 4 * N + N // 2


def test_cudas_native_dropout_fuses_into_what_reads_its_output():
    # rule 6, CUDA's dropout: native_dropout writes its output and a boolean mask (N / 4);
    # the residual add reads the output in the same kernel; the backward reads the mask
    records = _native_dropout_step()
    saved, total = fusable_bytes_saved(records)
    assert total == (2 * N + N // 4) + 3 * N + (2 * N + N // 4)
    assert saved == 2 * N  # the dropout's output neither written nor read back


def test_the_compile_credit_takes_the_time_of_every_op_the_estimate_fuses():
    # savings.fusion: CUDA's dropout (class copy) is fused by rule 6, so its memory-bound
    # time is in the base the saved share applies to: (9 + 6 + 9) us x 2N / 7.5N
    import pytest

    from gobrrr.budget import Budget, CallRow, RowBudget
    from gobrrr.remedies.base import Context
    from gobrrr.remedies.savings import fusion

    records = _native_dropout_step()
    times_us = {0: ("compute", 20), 1: ("memory", 9), 2: ("memory", 6), 3: ("compute", 20),
                4: ("compute", 20), 5: ("memory", 9), 6: ("compute", 20)}
    rows = [CallRow(i, r.op, r.module, r.phase, r.op_class, times_us[i][0],
                    times_us[i][1] * 1e-6, r.flops, r.bytes, 0.0)
            for i, r in enumerate(records)]
    per_class = [RowBudget("matmul", calls=4, compute_s=80e-6),
                 RowBudget("copy", calls=1, memory_s=9e-6),
                 RowBudget("pointwise", calls=2, memory_s=15e-6)]
    b = Budget(wall_s=110e-6, busy_s=104e-6, overhead_s=6e-6, memory_s=24e-6,
               compute_s=80e-6, floor_s=0.0, below_roof_s=0.0, per_call=rows,
               per_class=per_class)
    saved, _ = fusion(Context("cuda", b, None, records))
    # (the fusable classes' time alone, 15 us, left the dropout's 9 us out)
    assert saved["memory"] == pytest.approx(24e-6 * 2 / 7.5)


def test_a_residual_stream_is_read_as_its_sources_until_inductor_writes_it():
    # rule 7: a pre-norm transformer's residual stream r_i = r_(i-1) + a_i (a_i: a GEMM's
    # output), each read by its norm (same kernel) and by the next add (after GEMMs: a
    # kernel of its own). Inductor writes no r_i until one reads more than 4 tensors
    # with two readers (r4: x0, a1..a4); each kernel reads its r's sources instead:
    # kernels of 3n, 4n, 5n, 7n (r4 written) and 3n (r5, the last, read by its norm only)
    ops = [("aten::add", "pointwise", "forward", (0, 1), (2,))]  # r1 = x0 + a1
    r = 2
    for _ in range(2, 6):  # r2 .. r5
        ops += [("aten::layer_norm", "norm", "forward", (r,), (r + 1,)),
                ("aten::mm", "matmul", "forward", (r + 1, 99), (r + 2,)),  # a_i
                ("aten::add", "pointwise", "forward", (r, r + 2), (r + 3,))]
        r += 3
    ops.append(("aten::layer_norm", "norm", "forward", (r,), (r + 1,)))
    ops.append(("aten::mm", "matmul", "forward", (r + 1, 99), (r + 2,)))
    records = _ops(*ops)
    saved, total = fusable_bytes_saved(records)
    assert total == 5 * 3 * N + 5 * 2 * N  # five adds, five norms
    assert generated_bytes(records) == (3 + 4 + 5 + 7 + 3) * N  # 19 N with every r written


def _tied_weight_grad(then: tuple) -> list[OpRecord]:
    """A tied weight's gradient: the LM head's GEMM (mm) + the embedding's backward,
    summed by autograd (an add), then `then` reads the sum."""
    return _ops(("aten::mm", "matmul", "backward", (1, 2), (3,)),
                ("aten::embedding_dense_backward", "other", "backward", (4, 5), (6,)),
                ("aten::add", "pointwise", "backward", (3, 6), (7,)),
                then)


def test_a_gemms_output_added_into_a_gradient_is_the_gemms_accumulate():
    # rule 8: Inductor's addmm pattern; the add's kernel goes, the GEMM reads the
    # embedding's gradient: nothing of the add is left in generated code; the
    # embedding's backward (a scatter Inductor generates, 3N) stays
    records = _tied_weight_grad(("aten::_foreach_add_", "pointwise", "optimizer", (7, 8),
                                 ((8, N),)))
    saved, total = fusable_bytes_saved(records)
    assert total == 3 * N + 3 * N  # the add, then the optimizer's update of 8 by 7
    assert saved == 2 * N  # the add's read of the GEMM's output and its write
    assert generated_bytes(records) == 3 * N + 3 * N  # the scatter, the update
    # read by a pointwise op of its own graph: not folded (a GPU keeps it apart)
    apart = _tied_weight_grad(("aten::mul", "pointwise", "backward", (7, 9), (10,)))
    assert generated_bytes(apart) == 3 * N + (2 * N + 2 * N)  # the scatter, add+mul fused


def test_a_layer_norms_backward_reads_the_normalized_input_its_forward_wrote():
    # rule 9: r = x + a; layer_norm(r) -> out (a GEMM reads it), mean, rstd (8 B each);
    # r + (out @ w) after the GEMM, normed; the backward's layer norm reads r's normalized
    # values, which the forward's kernel writes (Inductor saves them, not r): r itself
    # is then read as its sources by the add after the GEMM (rule 7), never written
    records = _ops(("aten::add", "pointwise", "forward", (0, 1), (2,)),
                   ("aten::native_layer_norm", "norm", "forward", (2,), (3, (4, 8), (5, 8))),
                   ("aten::mm", "matmul", "forward", (3, 99), (6,)),
                   ("aten::add", "pointwise", "forward", (2, 6), (7,)),
                   ("aten::native_layer_norm", "norm", "forward", (7,), (8,)),
                   ("aten::mm", "matmul", "backward", (20, 99), (21,)),
                   ("aten::native_layer_norm_backward", "norm", "backward", (21, 2, 4, 5),
                    (22,)))
    # kernels: x, a -> out, mean, rstd, normalized r (4N + 16); x, a, the GEMM's
    # output -> the sum's norm (4N); the gradient, normalized r, mean, rstd -> r's
    # gradient (3N + 16). Without the rule r is written and read back: 10N + 32
    assert generated_bytes(records) == (4 * N + 16) + 4 * N + (3 * N + 16)

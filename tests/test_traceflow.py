"""Tensor identities guessed from shapes for a trace's ops (traceflow.ShapeFlow), and the
recorded arguments tracecount must rebuild, or must not, to give them."""

from gobrrr.remedies.attention import find_attention
from gobrrr.tracefile.columns import RecordedArgs
from gobrrr.tracefile.flow import ShapeFlow
from gobrrr.tracefile.opcount import count_recorded, output_of, tensor_inputs

Q = ((8, 12, 4096, 64), "bf16")
KT = ((8, 12, 64, 4096), "bf16")
S4 = ((8, 12, 4096, 4096), "bf16")
S3 = ((96, 4096, 4096), "bf16")
SCORE_BYTES = 8 * 12 * 4096 * 4096 * 2


def test_views_alias_their_input_and_other_ops_write_new_tensors():
    f = ShapeFlow()
    # q, k and v share a shape: one tensor to the guess (the module docstring's caveat)
    assert f.op("view", [Q], (KT[0], "bf16", 0)) == ((1,), ((1, 0),))  # k.transpose
    assert f.op("matmul", [Q, KT], (S4[0], "bf16", SCORE_BYTES)) == (
        (1, 1), ((2, SCORE_BYTES),))
    assert f.op("view", [S4], (S3[0], "bf16", 0)) == ((2,), ((2, 0),))  # same tensor
    assert f.op("pointwise", [S3], (S3[0], "bf16", SCORE_BYTES)) == (
        (2,), ((3, SCORE_BYTES),))
    # the latest tensor of a shape is the one read: 3, not 2
    assert f.op("softmax", [S3], None) == ((3,), ())  # output unknown: writes nothing
    assert f.op("pointwise", [S3], (S3[0], "bf16", SCORE_BYTES)) == (
        (3,), ((4, SCORE_BYTES),))


def test_a_chain_linked_by_shapes_is_found_as_attention():
    from gobrrr.counting import OpRecord

    f = ShapeFlow()
    ops = [("aten::transpose", "view", [Q], KT, 0),
           ("aten::bmm", "matmul", [Q, KT], S4, SCORE_BYTES),
           ("aten::mul", "pointwise", [S4], S4, SCORE_BYTES),
           ("aten::_softmax", "softmax", [S4], S4, SCORE_BYTES),
           ("aten::view", "view", [S4], S3, 0),
           ("aten::bmm", "matmul", [S3, Q], Q, 8 * 12 * 4096 * 64 * 2)]
    records = []
    for i, (op, cls, ins, out, nbytes) in enumerate(ops):
        reads, writes = f.op(cls, ins, (out[0], out[1], nbytes))
        records.append(OpRecord(index=i, op=op, module="Global", phase="forward",
                                op_class=cls, dtype="bf16", flops=0, bytes=nbytes,
                                tensor_core_unit=None, has_formula=True, reads=reads,
                                writes=writes))
    [m] = find_attention(records)
    # the view after the softmax names the same tensor: PV reads the probabilities
    assert [records[i].op for i in m.ops] == ["aten::bmm", "aten::mul", "aten::_softmax",
                                              "aten::bmm"]
    assert m.score_bytes == SCORE_BYTES


def test_recorded_arguments_give_inputs_and_the_rebuilt_output():
    args = RecordedArgs([[4, 8], [8, 2]], ["c10::BFloat16", "c10::BFloat16"],
                        [[8, 1], [2, 1]], ["", ""])
    assert tensor_inputs(args) == [((4, 8), "bf16"), ((8, 2), "bf16")]
    assert output_of(count_recorded("aten::mm", args)) == ((4, 2), "bf16", 4 * 2 * 2)
    # scalars and unrecorded arguments are not tensors
    add = RecordedArgs([[3], [], []], ["float", "Scalar", ""], None, ["", "2", ""])
    assert tensor_inputs(add) == [((3,), "fp32")]
    # an op that could not be rebuilt has no known output
    assert output_of(count_recorded("mylib::op", RecordedArgs([[10]], ["float"], None,
                                                             [""]))) is None


def test_an_undefined_tensor_where_the_schema_says_tensor_is_rebuilt_as_none():
    # _scaled_dot_product_efficient_attention_backward's attn_bias is `Tensor`, recorded ""
    # when no bias was given (GPT-2's training step on the H200, torch 2.11).
    t = [4, 12, 256, 64]
    args = RecordedArgs([t, t, t, t, [], t, [4, 12, 256], [], [], [], [], [], []],
                        ["float"] * 4 + [""] + ["float", "float", "long int", "long int",
                                                "Scalar", "ScalarList", "Scalar", "Scalar"],
                        None, [""] * 9 + ["0.0", "[True, True, True, False]", "True",
                                          "0.125"])
    c = count_recorded("aten::_scaled_dot_product_efficient_attention_backward", args)
    assert c.method == "meta" and c.op_class == "attention"
    assert c.flops == 5 * 2 * 4 * 12 * 256 * 256 * 64  # five matmuls of QK^T's size


def test_a_tensor_list_recorded_without_shapes_gets_a_regime_hint_not_zero_work():
    # AdamW's foreach ops over GPT-2's 148 parameters: torch 2.11 records the lists as [].
    args = RecordedArgs([[], [], []], ["TensorList", "TensorList", "Scalar"], None,
                        ["", "", "1"])
    c = count_recorded("aten::_foreach_add_", args)
    assert (c.flops, c.bytes, c.method, c.regime_hint) == (0, 0, "shapes", "memory")
    # with the shapes recorded, it is rebuilt and counted
    args = RecordedArgs([[[4], [2]], [[4], [2]], []], ["TensorList", "TensorList", "Scalar"],
                        None, ["", "", "1"])
    c = count_recorded("aten::_foreach_add_", args)
    assert c.method == "meta" and c.regime_hint is None and c.bytes > 0

"""Per-op rules on tiny hand-built graphs: FLOPs counted by hand, batch axes, roles, parameters."""

import numpy as np
import onnx
from onnx import helper

from tag.graph import load_model
from tests.graph.helpers_graph import F, I64, save, w


def _op(g, op_type):
    return next(op for op in g.ops if op.op_type == op_type)


def test_conv_grouped_and_transpose(tmp_path):
    # x [N,8,10,10] -> Conv(group 2, 3x3, pad 1, 16 out) -> ConvTranspose(16->4, 2x2, stride 2)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2),
             helper.make_node("ConvTranspose", ["y", "w2"], ["z"], kernel_shape=[2, 2], strides=[2, 2])]
    p = save(tmp_path, nodes, [("x", F, ["N", 8, 10, 10])], [("z", F, None)],
             [("w1", w(16, 4, 3, 3)), ("b1", w(16)), ("w2", w(16, 4, 2, 2))])
    g = load_model(p)
    conv, convt = _op(g, "Conv"), _op(g, "ConvTranspose")
    assert conv.fwd_flops_per_row == 2 * (16 * 10 * 10) * (4 * 3 * 3) + 16 * 10 * 10
    assert convt.fwd_flops_per_row == 2 * (16 * 10 * 10) * (4 * 2 * 2)
    assert g.tensors["z"].shape == (1, 4, 20, 20) and g.tensors["z"].batch_axis == 0
    assert conv.param_count == 16 * 4 * 9 + 16 and convt.param_count == 16 * 4 * 4
    assert g.param_count == 16 * 4 * 9 + 16 + 16 * 4 * 4
    assert conv.param_bytes == 4 * conv.param_count
    assert sorted(g.param_names) == ["b1", "w1", "w2"]


def test_gemm_matmul_einsum_attention(tmp_path):
    # x [N,6,8]; q = x @ Wq; s = q @ k^T per batch (attention); Gemm on a flattened row; Einsum bhd
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "qt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Einsum", ["p", "q"], ["o"], equation="bij,bjd->bid"),
             helper.make_node("Flatten", ["o"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1)]
    p = save(tmp_path, nodes, [("x", F, ["N", 6, 8])], [("y", F, None)],
             [("wq", w(8, 4)), ("wg", w(5, 24)), ("bg", w(5))])
    g = load_model(p)
    mm = [op for op in g.ops if op.op_type == "MatMul"]
    assert mm[0].fwd_flops_per_row == 2 * 6 * 4 * 8
    assert mm[1].fwd_flops_per_row == 2 * 6 * 6 * 4
    assert _op(g, "Softmax").fwd_flops_per_row == 5 * 36
    assert _op(g, "Einsum").fwd_flops_per_row == 2 * 6 * 6 * 4
    assert _op(g, "Gemm").fwd_flops_per_row == 2 * 5 * 24 + 5
    assert all(op.splittable and op.batched for op in g.ops)
    assert g.tensors["y"].batch_axis == 0 and g.tensors["qt"].batch_axis == 0
    assert _op(g, "MatMul").bwd_flops_per_row == 2 * _op(g, "MatMul").fwd_flops_per_row
    assert _op(g, "Softmax").bwd_flops_per_row == _op(g, "Softmax").fwd_flops_per_row
    assert _op(g, "Softmax").saved_bytes_per_row == 36 * 4  # its output
    assert _op(g, "Transpose").fwd_flops_per_row == 0 and _op(g, "Transpose").mem_bytes_per_row == 2 * 24 * 4
    assert _op(g, "Flatten").mem_bytes_per_row == 0  # a view


def test_pool_norm_reduce_elementwise(tmp_path):
    nodes = [helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["a", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["gp"]),
             helper.make_node("ReduceMean", ["r"], ["rm"], axes=[2, 3], keepdims=0),
             helper.make_node("Sum", ["gp", "gp", "gp"], ["out"])]
    p = save(tmp_path, nodes, [("x", F, ["N", 3, 8, 8])], [("out", F, None), ("rm", F, None)],
             [("s", w(3)), ("b", w(3)), ("m", w(3)), ("v", np.ones(3, np.float32))], opset=13)
    g = load_model(p)
    assert _op(g, "MaxPool").fwd_flops_per_row == 3 * 4 * 4 * 4
    assert _op(g, "BatchNormalization").fwd_flops_per_row == 2 * 3 * 4 * 4
    assert _op(g, "Relu").fwd_flops_per_row == 48
    assert _op(g, "GlobalAveragePool").fwd_flops_per_row == 48
    assert _op(g, "ReduceMean").fwd_flops_per_row == 48 and _op(g, "ReduceMean").splittable
    assert _op(g, "Sum").fwd_flops_per_row == 2 * 3
    assert _op(g, "BatchNormalization").param_count == 12


def test_reduction_across_batch_is_unsplittable(tmp_path):
    nodes = [helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=1),
             helper.make_node("Softmax", ["x"], ["p"], axis=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    p = save(tmp_path, nodes, [("x", F, ["N", 4])], [("y", F, None), ("p", F, None)], [("ax", np.array([0]))])
    g = load_model(p)
    assert not _op(g, "ReduceSum").splittable and g.tensors["s"].batch_axis is None
    assert not _op(g, "Softmax").splittable
    assert _op(g, "Add").splittable and g.tensors["y"].batch_axis == 0


def test_static_batch_reshape_constant_and_roles(tmp_path):
    # file batch 2 baked into a Reshape target; weights as graph inputs; int initializer is a constant
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("MatMul", ["r", "W"], ["y"]),
             helper.make_node("MatMul", ["y", "W2"], ["z"])]
    p = save(tmp_path, nodes, [("x", F, [2, 3, 4]), ("W", F, [12, 5]), ("W2", F, [5, 5])], [("z", F, None)],
             [("shape", np.array([2, 12]))])
    g = load_model(p)
    assert g.data_inputs == ["x"] and g.file_batch == 2 and g.batch_size == 2
    assert sorted(g.param_names) == ["W", "W2"] and g.tensors["shape"].role == "constant"
    assert [(b.tensor, b.index, b.value) for b in g.batch_constants] == [("shape", 0, 2)]
    mm = _op(g, "MatMul")
    assert mm.fwd_flops_per_row == 2 * 5 * 12  # per row: total / file batch
    assert load_model(p, batch_size=10, n_devices=4).batch_size == 10


def test_tied_weight_counted_once_and_generator(tmp_path):
    # W generated by ConstantOfShape and transposed (weight generators), used twice (tied)
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], ["W"], value=helper.make_tensor("v", F, [1], [0.5])),
             helper.make_node("Transpose", ["W"], ["Wt"]),
             helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("MatMul", ["h", "Wt"], ["y"])]
    p = save(tmp_path, nodes, [("x", F, ["N", 6])], [("y", F, None)], [("wshape", np.array([6, 3]))])
    g = load_model(p)
    gens = [op for op in g.ops if op.is_weight_generator]
    assert {op.op_type for op in gens} == {"ConstantOfShape", "Transpose"}
    assert g.param_names == ["W"] and g.param_count == 18
    mms = [op for op in g.ops if op.op_type == "MatMul"]
    assert mms[0].param_count == 18 and mms[1].param_count == 0 and mms[1].params == ["W"]


def test_embedding_gather_reads_rows_only(tmp_path):
    nodes = [helper.make_node("Gather", ["E", "ids"], ["e"]),
             helper.make_node("ReduceMean", ["e"], ["y"], axes=[1], keepdims=0)]
    p = save(tmp_path, nodes, [("ids", I64, ["N", 7])], [("y", F, None)], [("E", w(1000, 16))], opset=13)
    g = load_model(p)
    gather = _op(g, "Gather")
    assert g.data_inputs == ["ids"] and gather.param_count == 16000 and gather.fwd_flops_per_row == 0
    assert g.tensors["e"].batch_axis == 0 and gather.splittable
    assert gather.mem_bytes_fixed == 0
    assert gather.mem_bytes_per_row == 7 * 8 + 2 * 7 * 16 * 4  # ids + gathered rows read + output written


def test_unknown_op_is_memory_bound_with_one_warning(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("FancyOp", ["a"], ["b"], domain="com.microsoft"),
             helper.make_node("FancyOp", ["b"], ["c"], domain="com.microsoft")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["N", 4])],
                              [helper.make_tensor_value_info("c", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    p = tmp_path / "u.onnx"
    onnx.save(model, str(p))
    g = load_model(str(p))
    assert len(g.warnings) == 1 and "com.microsoft.FancyOp" in g.warnings[0]
    fancy = [op for op in g.ops if op.op_type == "FancyOp"]
    assert all(op.op_class == "other" and op.fwd_flops_per_row == 0 for op in fancy)


def test_external_data_weights(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["N", 64])],
                              [helper.make_tensor_value_info("y", F, None)],
                              initializer=[onnx.numpy_helper.from_array(w(64, 32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "ext.onnx"
    onnx.save(model, str(p), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
              size_threshold=0)
    assert (tmp_path / "ext.data").stat().st_size == 64 * 32 * 4
    g = load_model(str(p))
    assert g.param_count == 64 * 32 and g.ops[0].fwd_flops_per_row == 2 * 64 * 32


def test_reference_evaluator_fills_what_inference_cannot(tmp_path):
    # the Reshape target goes through float arithmetic: shape inference alone leaves r unknown
    nodes = [helper.make_node("Constant", [], ["half"], value=helper.make_tensor("c", F, [2], [2.0, 0.5])),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["sf"], to=F),
             helper.make_node("Mul", ["sf", "half"], ["h"]),
             helper.make_node("Cast", ["h"], ["hi"], to=I64),
             helper.make_node("Reshape", ["x", "hi"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    p = save(tmp_path, nodes, [("x", F, [4, 6])], [("y", F, None)])
    g = load_model(p, data_inputs=["x"])
    assert g.tensors["r"].shape == (8, 3) and all(t.shape is not None for t in g.tensors.values())


def test_one_element_bias_of_a_gemm_is_a_parameter():
    """dlrm_tiny's output layer has a shape-[1] bias: it trains like any weight (65,872 + 1 parameters)."""
    import os

    from tag.graph import load_model

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    g = load_model(os.path.join(root, "datasets/models/dlrm_tiny.onnx"))
    assert "top.2.bias" in g.param_names
    assert g.param_count == 65873


def test_recurrent_ops_flops_axes_and_saved_state(tmp_path):
    """LSTM (bidirectional, layout 1: X [N, T, I]) and GRU (layout 0 on X transposed to [T, N, I]), by hand: per row
    D x T x (2 G H (I + H) + 4 G H) FLOPs, backward 2x; rows on X's batch axis carry to Y; the memory model's
    internal state is 8 (LSTM) / 7 (GRU) copies of Y; no 'no cost rule' warning."""
    from tag.graph.costs import internal_saved_bytes

    T, I, H = 5, 3, 4
    nodes = [helper.make_node("LSTM", ["x", "wl", "rl"], ["yl"], hidden_size=H, direction="bidirectional", layout=1),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("GRU", ["xt", "wg", "rg"], ["yg"], hidden_size=H)]
    p = save(tmp_path, nodes, [("x", F, ["N", T, I])], [("yl", F, None), ("yg", F, None)],
             [("wl", w(2, 4 * H, I)), ("rl", w(2, 4 * H, H)), ("wg", w(1, 3 * H, I)), ("rg", w(1, 3 * H, H))])
    g = load_model(p)
    lstm, gru = _op(g, "LSTM"), _op(g, "GRU")
    assert lstm.op_class == gru.op_class == "rnn" and not g.warnings
    assert lstm.fwd_flops_per_row == 2 * T * (2 * 16 * (I + H) + 4 * 16)
    assert gru.fwd_flops_per_row == 1 * T * (2 * 12 * (I + H) + 4 * 12)
    assert lstm.bwd_flops_per_row == 2 * lstm.fwd_flops_per_row and gru.bwd_flops_per_row == 2 * gru.fwd_flops_per_row
    assert g.tensors["yl"].shape == (1, T, 2, H) and g.tensors["yl"].batch_axis == 0
    assert g.tensors["yg"].shape == (T, 1, 1, H) and g.tensors["yg"].batch_axis == 2
    assert internal_saved_bytes(lstm, g.tensors) == (8 * T * 2 * H * 4, 0.0)
    assert internal_saved_bytes(gru, g.tensors) == (7 * T * H * 4, 0.0)

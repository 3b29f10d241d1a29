"""The exact post-export clean-ups on hand-made graphs, checked against onnx.reference before and after."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from zoo.cleanup import drop_zero_conv_bias, fold_constant_nodes


def _conv_model(bias_value: float) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Shape", ["w"], ["w_shape"], start=0, end=1),
        helper.make_node("Constant", [], ["one"], value_ints=[1]),
        helper.make_node("Expand", ["w_shape", "one"], ["channels"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(bias_value, np.float32))),
        helper.make_node("CastLike", ["zero", "x"], ["zero_like"]),
        helper.make_node("Expand", ["zero_like", "channels"], ["bias"]),
        helper.make_node("Conv", ["x", "w", "bias"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 5, 5]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 5, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_zero_conv_bias_dropped_exactly():
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 2, 5, 5)).astype(np.float32),
             "w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32)}
    model = _conv_model(0.0)
    before = ReferenceEvaluator(model).run(None, feeds)[0]
    assert drop_zero_conv_bias(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Conv"] and len(model.graph.node[0].input) == 2
    np.testing.assert_array_equal(ReferenceEvaluator(model).run(None, feeds)[0], before)


def test_nonzero_conv_bias_kept():
    model = _conv_model(0.5)
    assert drop_zero_conv_bias(model) == 0
    assert len(model.graph.node) == 7


def test_constant_chain_folded_to_its_value():
    # axes = Reshape(Cast(Constant [2., 3.]), [-1]) feeding ReduceMean: folds to Constant [2, 3].
    nodes = [
        helper.make_node("Constant", [], ["a"], value=numpy_helper.from_array(np.array([2.0, 3.0], np.float32))),
        helper.make_node("Cast", ["a"], ["a64"], to=TensorProto.INT64),
        helper.make_node("Constant", [], ["minus1"], value_ints=[-1]),
        helper.make_node("Reshape", ["a64", "minus1"], ["axes"]),
        helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 5, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    x = np.random.default_rng(1).standard_normal((2, 4, 5, 6)).astype(np.float32)
    assert fold_constant_nodes(model) == 2
    assert [n.op_type for n in model.graph.node] == ["Constant", "ReduceMean"]
    assert numpy_helper.to_array(model.graph.node[0].attribute[0].t).tolist() == [2, 3]
    np.testing.assert_allclose(ReferenceEvaluator(model).run(None, {"x": x})[0], x.mean(axis=(2, 3)), rtol=1e-6)
    inferred = onnx.shape_inference.infer_shapes(model)
    assert [d.dim_param or d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim] == ["batch", 4]

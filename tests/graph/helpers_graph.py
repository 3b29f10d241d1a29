"""Tiny ONNX models built with onnx.helper for the graph tests (no torch)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def save(tmp_path, nodes, inputs, outputs, inits=(), name="m.onnx", opset=17, **kw):
    """Write a model and return its path. inputs/outputs: (name, elem_type, dims) tuples."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def w(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

"""Exact graph clean-ups after a dynamo export with optimize=False (semantics unchanged)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def _is_zero_constant(node: onnx.NodeProto | None) -> bool:
    if node is None or node.op_type != "Constant":
        return False
    for attr in node.attribute:
        if attr.name == "value":
            values = numpy_helper.to_array(attr.t)
            return values.size == 1 and float(values.reshape(-1)[0]) == 0.0
    return False


def drop_zero_conv_bias(model: onnx.ModelProto) -> int:
    """Remove the all-zero bias that the exporter builds for bias-free Conv layers; returns how many.

    The pattern is Conv(x, W, Expand(CastLike(Constant 0, x), Expand(Shape(W)[0:1], [1]))): a zero vector
    of W's output channels, whose length shape inference cannot see. ONNX Conv's bias is optional and
    zero when absent, so dropping it is exact. Nodes left without consumers are removed.
    """
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    dropped = 0
    for node in graph.node:
        if node.op_type != "Conv" or len(node.input) < 3 or not node.input[2]:
            continue
        expand = producer.get(node.input[2])
        if expand is None or expand.op_type != "Expand":
            continue
        cast = producer.get(expand.input[0])
        if cast is None or cast.op_type != "CastLike" or not _is_zero_constant(producer.get(cast.input[0])):
            continue
        del node.input[2]
        dropped += 1
    if dropped:
        remove_dead_nodes(model)
    return dropped


def remove_dead_nodes(model: onnx.ModelProto) -> None:
    """Delete nodes none of whose outputs is consumed by another node or is a graph output."""
    graph = model.graph
    while True:
        used = {name for node in graph.node for name in node.input} | {out.name for out in graph.output}
        dead = [node for node in graph.node if not any(out in used for out in node.output)]
        if not dead:
            return
        keep = [node for node in graph.node if any(out in used for out in node.output)]
        del graph.node[:]
        graph.node.extend(keep)
        names = {out for node in keep for out in node.output} | {i.name for i in graph.input} \
            | {i.name for i in graph.initializer}
        kept_info = [v for v in graph.value_info if v.name in names]
        del graph.value_info[:]
        graph.value_info.extend(kept_info)


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a Constant node as a numpy array (None for sparse or string constants)."""
    if len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    if attr.name == "value_ints":
        return np.array(list(attr.ints), dtype=np.int64)
    if attr.name == "value_int":
        return np.array(attr.i, dtype=np.int64)
    if attr.name == "value_floats":
        return np.array(list(attr.floats), dtype=np.float32)
    if attr.name == "value_float":
        return np.array(attr.f, dtype=np.float32)
    return None


FOLD_LIMIT_ELEMENTS = 4096  # constants folded here are shape and axis vectors, never weights


def fold_constant_nodes(model: onnx.ModelProto) -> int:
    """Replace nodes whose inputs all come from Constant nodes by one Constant; returns how many.

    Only small results (at most FOLD_LIMIT_ELEMENTS elements) are folded, so weights, initializers and graph
    inputs are never touched; values are computed with onnx.reference on the single node (exact).
    """
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    opset = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    constants: dict[str, np.ndarray] = {}
    folded = 0
    new_nodes = []
    for node in graph.node:
        if node.op_type == "Constant":
            value = _constant_value(node)
            if value is not None:
                constants[node.output[0]] = value
            new_nodes.append(node)
            continue
        inputs = [name for name in node.input if name]
        if (node.domain not in ("", "ai.onnx") or not inputs or len(node.output) != 1 or node.op_type == "If"
                or not all(name in constants for name in inputs)):
            new_nodes.append(node)
            continue
        single = onnx.helper.make_model(
            onnx.helper.make_graph([node], "fold", [], [onnx.helper.make_tensor_value_info(node.output[0], 0, None)]),
            opset_imports=opset)
        feeds = {name: constants[name] for name in inputs}
        graph_inputs = [onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype), array.shape) for name, array in feeds.items()]
        single.graph.input.extend(graph_inputs)
        result = ReferenceEvaluator(single).run(None, feeds)[0]
        if result.size > FOLD_LIMIT_ELEMENTS:
            new_nodes.append(node)
            continue
        constants[node.output[0]] = result
        new_nodes.append(onnx.helper.make_node("Constant", [], [node.output[0]], name=node.name,
                                               value=numpy_helper.from_array(result, node.output[0])))
        folded += 1
    del graph.node[:]
    graph.node.extend(new_nodes)
    if folded:
        remove_dead_nodes(model)
    return folded

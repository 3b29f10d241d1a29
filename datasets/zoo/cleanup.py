"""Exact graph clean-ups after a dynamo export with optimize=False (semantics unchanged)."""

from __future__ import annotations

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

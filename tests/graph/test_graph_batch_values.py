"""Batch-valued shape arithmetic (tag.graph.batch_values): outputs whose extent is the row count read off a shape.

Hand-built as the dynamo exporter writes transformers masks: b = Squeeze(Shape(x, end=1)); Range(0, b, 1) gives
one index per row; Expand(ones[1, 4], Concat(Reshape(b, [1]), [4])) is an attention mask of B rows. Expected axes
worked out by hand; the graph has a symbolic batch, so nothing about it is a batch constant.
"""

import numpy as np
from onnx import helper

from helpers_graph import F, I64, save
from tag.graph import load_model
from tag.graph.batch_values import gather_nd_rule
from tag.graph.opgraph import TensorInfo


def _mask_model(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["shp"], end=1),
             helper.make_node("Squeeze", ["shp"], ["b"]),
             helper.make_node("Range", ["zero", "b", "one"], ["rows"]),
             helper.make_node("Unsqueeze", ["rows", "ax1"], ["rows2"]),
             helper.make_node("Cast", ["rows2"], ["rowsf"], to=F),
             helper.make_node("Reshape", ["b", "ax1"], ["b1"]),
             helper.make_node("Concat", ["b1", "four"], ["tshape"], axis=0),
             helper.make_node("Expand", ["ones", "tshape"], ["mask"]),
             helper.make_node("Mul", ["x", "mask"], ["xm"]),
             helper.make_node("Add", ["xm", "rowsf"], ["y"]),
             helper.make_node("Range", ["zero", "five", "one"], ["pos"])]  # a constant range: no rows
    inits = [("zero", np.array(0, np.int64)), ("one", np.array(1, np.int64)), ("five", np.array(5, np.int64)),
             ("ax1", np.array([1], np.int64)), ("four", np.array([4], np.int64)), ("ones", np.ones((1, 4), np.float32))]
    return save(tmp_path, nodes, [("x", F, ["B", 4])], [("y", F, ["B", 4]), ("pos", I64, [5])], inits)


def test_range_and_expand_of_the_batch_are_batched(tmp_path):
    g = load_model(_mask_model(tmp_path), batch_size=6)
    axes = {t: g.tensors[t].batch_axis for t in ("shp", "b", "rows", "rows2", "rowsf", "tshape", "mask", "y", "pos")}
    assert axes == {"shp": None, "b": None, "rows": 0, "rows2": 0, "rowsf": 0, "tshape": None, "mask": 0, "y": 0,
                    "pos": None}
    by_out = {op.outputs[0]: op for op in g.ops}
    assert by_out["rows"].batched and by_out["rows"].splittable
    assert by_out["mask"].batched and by_out["y"].splittable and not by_out["pos"].batched
    assert g.batch_constants == []


def test_gather_nd_rule_by_hand():
    t = lambda name, shape, axis: TensorInfo(name, "int64", shape, axis)  # noqa: E731
    out = t("o", (2, 1, 16, 1), None)
    # indices [B, 1, 16, 1, 2] batched on 0, data [B, 16] batched on 0: the mask gather, row-local
    assert gather_nd_rule(t("d", (2, 16), 0), t("i", (2, 1, 16, 1, 2), 0), out, 0) == ([0], True)
    # data batched on another axis than the indices: rows not local
    assert gather_nd_rule(t("d", (16, 2), 1), t("i", (2, 1, 16, 1, 2), 0), out, 0) == ([0], False)
    # batch only on the index tuple's axis: no output batch axis
    assert gather_nd_rule(t("d", (2, 16), None), t("i", (16, 2), 1), t("o", (16,), None), 0) == ([None], False)

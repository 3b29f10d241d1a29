"""Batch constants baked into ConstantOfShape shapes and Tile repeats (tiny hand-built graphs).

Each expected (tensor, index, value) is worked out by hand; a second check rewrites the found entry the way
deploy does (value // file_batch x rows) and runs the graph with onnx's reference evaluator at another row count.
"""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tag.graph import load_model
from tests.graph.helpers_graph import F, I64, save, w


def _zeros_like_shape(name_in, name_out):
    return helper.make_node("ConstantOfShape", [name_in], [name_out],
                            value=numpy_helper.from_array(np.zeros(1, np.float32)))


def _value(model, name, file_feeds):
    """The value of tensor `name` when the model runs on `file_feeds` (initializer or folded node output)."""
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t).copy()
    return np.asarray(ReferenceEvaluator(model).run([name], file_feeds)[0]).copy()


def _runs_at(path, consts, rows, feeds):
    """Rewrite each found constant entry for `rows` rows (deploy's rule) and evaluate; return the outputs.

    A constant that is a folded node output is replaced by a Constant node holding the rewritten value.
    """
    model = onnx.load(path)
    g = load_model(path)
    file_feeds = {k: np.zeros((g.file_batch,) + v.shape[1:], v.dtype) for k, v in feeds.items()}
    for c in consts:
        v = _value(model, c.tensor, file_feeds)
        v.reshape(-1)[c.index] = v.reshape(-1)[c.index] // g.file_batch * rows
        new = numpy_helper.from_array(v, c.tensor)
        for t in model.graph.initializer:
            if t.name == c.tensor:
                t.CopyFrom(new)
        for n in model.graph.node:
            if c.tensor in n.output:
                n.CopyFrom(helper.make_node("Constant", [], [c.tensor], value=new))
    return ReferenceEvaluator(model).run(None, feeds)


def test_constant_of_shape_added_to_data(tmp_path):
    nodes = [_zeros_like_shape("s", "z"), helper.make_node("Add", ["x", "z"], ["y"])]
    p = save(tmp_path, nodes, [("x", F, [4, 3])], [("y", F, [4, 3])], inits=[("s", np.array([4, 3], np.int64))])
    g = load_model(p)
    assert [(c.tensor, c.index, c.value) for c in g.batch_constants] == [("s", 0, 4)]
    x = w(2, 3)
    (y,) = _runs_at(p, g.batch_constants, 2, {"x": x})
    np.testing.assert_allclose(y, x)
    with pytest.raises(Exception):  # unrewritten, the baked batch breaks the graph at 2 rows
        ReferenceEvaluator(onnx.load(p)).run(None, {"x": x})


def test_constant_of_shape_through_concat_and_cast(tmp_path):
    nodes = [helper.make_node("Concat", ["b", "e"], ["s64"], axis=0),
             helper.make_node("Cast", ["s64"], ["s"], to=I64),
             _zeros_like_shape("s", "z"),
             helper.make_node("Concat", ["x", "z"], ["y"], axis=1)]
    p = save(tmp_path, nodes, [("x", F, [6, 3])], [("y", F, [6, 5])],
             inits=[("b", np.array([6], np.int64)), ("e", np.array([2], np.int64))])
    g = load_model(p)
    assert [(c.tensor, c.index, c.value) for c in g.batch_constants] == [("s", 0, 6)]  # folded
    (y,) = _runs_at(p, g.batch_constants, 3, {"x": w(3, 3)})
    assert y.shape == (3, 5)


def test_tile_of_a_token_concatenated_with_data(tmp_path):
    """A learned (1, 1, 4) token tiled to the batch (repeats [2, 1, 1]) and concatenated on the sequence axis."""
    nodes = [helper.make_node("Tile", ["cls", "reps"], ["t"]),
             helper.make_node("Concat", ["t", "x"], ["y"], axis=1)]
    p = save(tmp_path, nodes, [("x", F, [2, 5, 4])], [("y", F, [2, 6, 4])],
             inits=[("cls", w(1, 1, 4)), ("reps", np.array([2, 1, 1], np.int64))])
    g = load_model(p)
    assert [(c.tensor, c.index, c.value) for c in g.batch_constants] == [("reps", 0, 2)]
    (y,) = _runs_at(p, g.batch_constants, 5, {"x": w(5, 5, 4)})
    assert y.shape == (5, 6, 4)
    assert g.param_count == 4  # the token, counted once


def test_tile_by_constant_node_repeats_broadcast_into_mul(tmp_path):
    nodes = [helper.make_node("Constant", [], ["reps"], value=numpy_helper.from_array(np.array([3, 1], np.int64))),
             helper.make_node("Tile", ["m", "reps"], ["t"]),
             helper.make_node("Mul", ["x", "t"], ["y"])]
    p = save(tmp_path, nodes, [("x", F, [3, 4])], [("y", F, [3, 4])], inits=[("m", w(1, 4))])
    g = load_model(p)
    assert [(c.tensor, c.index, c.value) for c in g.batch_constants] == [("reps", 0, 3)]


@pytest.mark.parametrize("case", ["tile_source_has_batch", "broadcast_dim_one", "file_batch_one", "other_axis"])
def test_no_batch_constant(tmp_path, case):
    if case == "tile_source_has_batch":  # repeats 1 on the batch axis: the dim 4 is the source's
        nodes = [helper.make_node("Tile", ["m", "reps"], ["t"]), helper.make_node("Add", ["x", "t"], ["y"])]
        inits = [("m", w(4, 1)), ("reps", np.array([1, 3], np.int64))]
        x = [4, 3]
    elif case == "broadcast_dim_one":  # shape [1, 3] broadcasts to any rows
        nodes = [_zeros_like_shape("s", "z"), helper.make_node("Add", ["x", "z"], ["y"])]
        inits, x = [("s", np.array([1, 3], np.int64))], [4, 3]
    elif case == "file_batch_one":
        nodes = [_zeros_like_shape("s", "z"), helper.make_node("Add", ["x", "z"], ["y"])]
        inits, x = [("s", np.array([1, 3], np.int64))], [1, 3]
    else:  # the constant's 4 sits on a non-batch axis
        nodes = [_zeros_like_shape("s", "z"), helper.make_node("Add", ["x", "z"], ["y"])]
        inits, x = [("s", np.array([1, 4], np.int64))], [4, 4]
    p = save(tmp_path, nodes, [("x", F, x)], [("y", F, x)], inits=inits)
    assert load_model(p).batch_constants == []


def test_shared_shape_constant_listed_once(tmp_path):
    """Two Reshapes reading one target constant give one entry (deploy rewrites each entry once)."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Reshape", ["r", "s"], ["y"])]
    p = save(tmp_path, nodes, [("x", F, [4, 2, 3])], [("y", F, [4, 6])], inits=[("s", np.array([4, 6], np.int64))])
    assert [(c.tensor, c.index, c.value) for c in load_model(p).batch_constants] == [("s", 0, 4)]

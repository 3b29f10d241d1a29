"""tag.graph.shardable: the layouts of column, row and heads splits, worked out by hand from the shipped models'
op lists (datasets/models: mlp = three Gemm layers of 512; small_transformer = 4 heads of 32, an MLP of 512)."""

import pytest

from tag.graph import load_model
from tag.graph.shardable import NotShardable, ParamSlice, ReshapeRewrite, analyse_group


@pytest.fixture(scope="module")
def mlp():
    return load_model("datasets/models/mlp.onnx")


@pytest.fixture(scope="module")
def transformer():
    return load_model("datasets/models/small_transformer.onnx")


def _ids(graph, first: str, last: str) -> list[int]:
    idx = graph.op_index()
    return list(range(idx[first], idx[last] + 1))


def test_a_gemm_alone_splits_by_columns_or_rows(mlp):
    lay = analyse_group(mlp, [0], "column")  # Gemm(x, W[512 out, 512 in], transB=1) + bias
    assert lay.units == [512] and lay.exact == [False]
    assert lay.params == [ParamSlice("0.weight", 0, 0, 512), ParamSlice("0.bias", 0, 0, 512)]
    assert lay.split_outputs == {"linear": (-1, 0)} and not lay.reduce_outputs
    row = analyse_group(mlp, [0], "row")
    assert row.params == [ParamSlice("0.weight", 1, 0, 512)]  # input features: axis 1 of [out, in]
    assert row.narrow_inputs == [(0, 0, 0)] and row.reduce_outputs == ["linear"] and row.bias_once == ["0.bias"]
    assert not row.split_outputs


def test_a_megatron_pair_needs_heads(mlp):
    ops = [0, 1, 2]  # Gemm, Relu, Gemm
    lay = analyse_group(mlp, ops, "heads")
    assert lay.units == [512]
    assert set(lay.params) == {ParamSlice("0.weight", 0, 0, 512), ParamSlice("0.bias", 0, 0, 512),
                               ParamSlice("2.weight", 1, 0, 512)}
    assert lay.reduce_outputs == ["linear_1"] and lay.bias_once == ["2.bias"] and lay.sharded_ops == {0, 1, 2}
    assert not lay.split_outputs
    with pytest.raises(NotShardable, match="column: Gemm node_linear_1 takes a split input"):
        analyse_group(mlp, ops, "column")
    with pytest.raises(NotShardable, match="row: Gemm node_linear_1 is a second weight op"):
        analyse_group(mlp, ops, "row")


def test_attention_splits_by_heads(transformer):
    g = transformer
    ops = _ids(g, "node_Transpose_13", "node_add_103")  # layer 0: q, k, v, attention, out projection, residual
    lay = analyse_group(g, ops, "heads")
    assert lay.units == [4] and lay.exact == [True]  # one pair: q, k and v joined by the two attention MatMuls
    names = {(p.name, p.axis, p.length) for p in lay.params}
    for x in ("q", "k", "v"):
        assert (f"layers.0.attn.{x}.weight", 0, 128) in names  # Linear weight [out, in] through its Transpose
        assert (f"layers.0.attn.{x}.bias", 0, 128) in names
    assert ("layers.0.attn.out.weight", 1, 128) in names and len(names) == 7
    idx = g.op_index()
    assert lay.reduce_outputs == [g.ops[idx["node_MatMul_44"]].outputs[0]]
    assert set(lay.reshape_rewrites) == {ReshapeRewrite(idx[n], 2, 0, 4) for n in ("node_view", "node_view_1",
                                                                                    "node_view_2")} | {
        ReshapeRewrite(idx["node__unsafe_view"], 2, 0, 128)}
    assert idx["node_softmax"] in lay.sharded_ops and idx["node_layer_norm"] not in lay.sharded_ops
    assert not lay.split_outputs


def test_mlp_block_and_the_layernorm_rule(transformer):
    g = transformer
    lay = analyse_group(g, _ids(g, "node_layer_norm", "node_add_132"), "heads")
    assert lay.units == [512] and lay.exact == [False]
    # a column-split projection cannot feed the residual add (it needs every feature)
    with pytest.raises(NotShardable, match="Add node_add_103 combines a split tensor with whole add_4"):
        analyse_group(g, _ids(g, "node_Transpose_43", "node_add_103"), "column")
    # ... but alone it leaves its output split for the consumer to gather
    lay = analyse_group(g, _ids(g, "node_Transpose_43", "node_clone_2"), "column")
    assert lay.split_outputs == {"clone_2": (-1, 0)}


def test_no_weight_op_is_not_shardable(mlp):
    with pytest.raises(NotShardable, match="no weight op"):
        analyse_group(mlp, [1], "column")


def test_weights_made_by_constant_of_shape_shard_like_initializers(tmp_path):
    """The light ONNX zoo stores no weights: each is a ConstantOfShape output (a weight generator, role param).
    Conv(x[N,3,8,8], W[16,3,3,3] + b[16]) split by columns: output channels, axis 0 of W, 16 units; by rows: input
    channels, axis 1 of W, 3 units (worked out from Conv's [out, in, kh, kw] weight layout)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def generated(name, dims):
        shape = numpy_helper.from_array(np.array(dims, dtype=np.int64), f"{name}_shape")
        return shape, helper.make_node("ConstantOfShape", [f"{name}_shape"], [name],
                                       value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.01]))

    ws, wn = generated("W", [16, 3, 3, 3])
    bs, bn = generated("b", [16])
    conv = helper.make_node("Conv", ["x", "W", "b"], ["y"], pads=[1, 1, 1, 1])
    g = helper.make_graph([wn, bn, conv], "light", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16, 8, 8])], initializer=[ws, bs])
    path = tmp_path / "light_conv.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    graph = load_model(str(path))
    conv_id = [i for i, op in enumerate(graph.ops) if op.op_type == "Conv"]
    col = analyse_group(graph, conv_id, "column")
    assert col.units == [16]
    assert col.params == [ParamSlice("W", 0, 0, 16), ParamSlice("b", 0, 0, 16)]
    row = analyse_group(graph, conv_id, "row")
    assert row.units == [3] and row.params == [ParamSlice("W", 1, 0, 3)] and row.bias_once == ["b"]


def test_every_light_zoo_conv_splits_by_output_channels():
    """Every ungrouped Conv of the light ONNX zoo, alone, column-split: one unit per output channel, the weight
    sliced on axis 0 (second method: the channel count is dim 0 of the shape its ConstantOfShape is given)."""
    import glob
    import os

    import onnx
    from onnx import numpy_helper

    light = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    paths = sorted(glob.glob(os.path.join(light, "light_*.onnx")))
    assert len(paths) >= 9
    checked = 0
    for path in paths:
        m = onnx.load(path)
        inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        made = {n.output[0]: [int(d) for d in inits[n.input[0]]] for n in m.graph.node if n.op_type == "ConstantOfShape"}
        graph = load_model(path)
        for i, op in enumerate(graph.ops):
            if op.op_type != "Conv" or int(op.attrs.get("group", 1)) != 1:
                continue
            lay = analyse_group(graph, [i], "column")
            w = op.inputs[1]
            assert lay.units == [made[w][0]], (path, op.name)
            assert lay.params[0] == ParamSlice(w, 0, 0, made[w][0])
            checked += 1
    assert checked > 100

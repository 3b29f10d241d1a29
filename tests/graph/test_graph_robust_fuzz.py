"""Fuzzing the loader: mutated small models load or raise InputError (one line naming the file), nothing else.

Byte-level mutations (flips, truncations, insertions) of the serialized file and protobuf-level mutations
(op types, inputs, attributes, initializer dims and types, opset, graph inputs and outputs). Examples are
derandomized, so a failure reproduces.
"""

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tag.errors import InputError
from tag.graph import load_model

F = TensorProto.FLOAT
OPS = ("Relu Add MatMul Reshape Transpose Concat Gather Slice Tile ConstantOfShape Expand Squeeze Unsqueeze Conv "
       "Gemm Softmax ReduceMean Flatten If Loop Split Einsum BatchNormalization MaxPool Shape Cast NoSuchOp").split()
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _seed_models():
    conv = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Reshape", ["r", "s"], ["f"]), helper.make_node("Gemm", ["f", "G", "b"], ["y"], transB=1)],
        "conv", [helper.make_tensor_value_info("x", F, ["N", 2, 4, 4])], [helper.make_tensor_value_info("y", F, None)],
        initializer=[numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "W"),
                     numpy_helper.from_array(np.array([1, 48], np.int64), "s"),
                     numpy_helper.from_array(np.ones((5, 48), np.float32), "G"),
                     numpy_helper.from_array(np.ones(5, np.float32), "b")])
    attn = helper.make_graph(
        [helper.make_node("MatMul", ["x", "Wq"], ["q"]), helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
         helper.make_node("MatMul", ["q", "qt"], ["a"]), helper.make_node("Softmax", ["a"], ["p"], axis=-1),
         helper.make_node("ConstantOfShape", ["zs"], ["z"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
         helper.make_node("Add", ["p", "z"], ["pz"]), helper.make_node("MatMul", ["pz", "q"], ["o"]),
         helper.make_node("ReduceMean", ["o", "ax"], ["y"], keepdims=0)],
        "attn", [helper.make_tensor_value_info("x", F, [2, 3, 4])], [helper.make_tensor_value_info("y", F, None)],
        initializer=[numpy_helper.from_array(np.ones((4, 4), np.float32), "Wq"),
                     numpy_helper.from_array(np.array([2, 3, 3], np.int64), "zs"),
                     numpy_helper.from_array(np.array([1], np.int64), "ax")])
    return [helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]) for g in (conv, attn)]


SEEDS = _seed_models()


def _loads_or_input_error(path):
    try:
        load_model(path)
    except InputError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(str(path)), msg


def test_seed_models_load(tmp_path):
    for k, m in enumerate(SEEDS):
        onnx.save(m, str(tmp_path / f"{k}.onnx"))
        assert load_model(str(tmp_path / f"{k}.onnx")).ops


@FUZZ
@given(which=st.integers(0, len(SEEDS) - 1),
       edits=st.lists(st.tuples(st.sampled_from(["flip", "cut", "insert"]), st.floats(0, 1), st.binary(min_size=1, max_size=8)),
                      min_size=1, max_size=4))
def test_byte_mutations(tmp_path, which, edits):
    data = bytearray(SEEDS[which].SerializeToString())
    for kind, where, payload in edits:
        i = int(where * len(data))
        if kind == "flip" and i < len(data):
            data[i] ^= payload[0] or 0xFF
        elif kind == "cut":
            data = data[:i]
        else:
            data[i:i] = payload
    p = tmp_path / "bytes.onnx"
    p.write_bytes(bytes(data))
    _loads_or_input_error(str(p))


ODD_INTS = [-9, -1, 0, 1, 3, 7, 1 << 40]


def _mutate(m, kind, a, b, op):
    g = m.graph
    n = g.node[a % len(g.node)] if g.node else None
    names = [o for x in g.node for o in x.output] + [i.name for i in g.input] + ["", "nowhere"]
    if kind == "op_type" and n:
        n.op_type = op
    elif kind == "input" and n and n.input:
        n.input[b % len(n.input)] = names[a % len(names)]
    elif kind == "drop_input" and n and n.input:
        del n.input[b % len(n.input)]
    elif kind == "attr" and n and n.attribute:
        at = n.attribute[b % len(n.attribute)]
        if at.type == onnx.AttributeProto.INT:
            at.i = ODD_INTS[a % len(ODD_INTS)]
        elif at.type == onnx.AttributeProto.INTS and at.ints:
            at.ints[a % len(at.ints)] = ODD_INTS[b % len(ODD_INTS)]
        else:
            at.type = [1, 2, 4, 7][a % 4]
    elif kind == "add_attr" and n:
        n.attribute.append(helper.make_attribute(["axis", "perm", "axes", "to", "keepdims"][a % 5], [3, [5, 0], -9, 1.5][b % 4]))
    elif kind == "init_dims" and g.initializer:
        t = g.initializer[a % len(g.initializer)]
        if t.dims:
            t.dims[b % len(t.dims)] = [0, -1, 1, 2, 1 << 31][a % 5]
    elif kind == "init_type" and g.initializer:
        g.initializer[a % len(g.initializer)].data_type = [0, 1, 2, 6, 7, 9, 10, 11, 13, 16, 99][b % 11]
    elif kind == "drop_init" and g.initializer:
        del g.initializer[a % len(g.initializer)]
    elif kind == "output" and n:
        n.output[0] = names[b % len(names)]
    elif kind == "opset":
        m.opset_import[0].version = [1, 8, 9, 11, 13, 21, 30][a % 7]
    elif kind == "input_dim":
        dims = g.input[0].type.tensor_type.shape.dim
        d = dims[a % len(dims)]
        if b % 2:
            d.dim_value = [0, 1, 3, 100000][a % 4]
        else:
            d.dim_param = "Q"
    elif kind == "domain" and n:
        n.domain = ["", "com.microsoft", "ai.onnx.ml", "custom"][b % 4]
    elif kind == "graph_output":
        g.output[0].name = names[a % len(names)]
    elif kind == "shuffle" and len(g.node) > 1:
        nodes = list(g.node)
        nodes.insert(b % len(nodes), nodes.pop(a % len(nodes)))
        del g.node[:]
        g.node.extend(nodes)


KINDS = ["op_type", "input", "drop_input", "attr", "add_attr", "init_dims", "init_type", "drop_init", "output",
         "opset", "input_dim", "domain", "graph_output", "shuffle"]


@FUZZ
@given(which=st.integers(0, len(SEEDS) - 1),
       edits=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 1000), st.integers(0, 1000), st.sampled_from(OPS)),
                      min_size=1, max_size=3))
def test_protobuf_mutations(tmp_path, which, edits):
    m = onnx.ModelProto()
    m.CopyFrom(SEEDS[which])
    for kind, a, b, op in edits:
        _mutate(m, kind, a, b, op)
    p = tmp_path / "proto.onnx"
    p.write_bytes(m.SerializeToString())
    _loads_or_input_error(str(p))


def _with(tmp_path, edit):
    m = onnx.ModelProto()
    m.CopyFrom(SEEDS[0])
    edit(m.graph)
    p = str(tmp_path / "m.onnx")
    onnx.save(m, p)
    with pytest.raises(InputError) as e:
        load_model(p)
    return str(e.value)


def test_found_initializer_with_fewer_values_than_dims(tmp_path):
    msg = _with(tmp_path, lambda g: g.initializer[1].dims.__setitem__(0, 3))  # 's' holds 2 values
    assert "initializer 's'" in msg and "24 stored bytes" in msg and "found 16" in msg


def test_found_gemm_with_one_input(tmp_path):
    msg = _with(tmp_path, lambda g: g.node[3].input.__delitem__(slice(1, 3)))
    assert "(Gemm)" in msg and "inputs" in msg and "found 1" in msg


def test_found_attribute_of_the_wrong_type(tmp_path):
    def edit(g):
        g.node[3].attribute[0].type = onnx.AttributeProto.FLOAT
    msg = _with(tmp_path, edit)
    assert "(Gemm) attribute 'transB'" in msg and "type INT" in msg


def test_found_op_type_that_is_not_utf8(tmp_path):
    data = SEEDS[0].SerializeToString()
    assert data.count(b"Relu") == 1
    p = tmp_path / "m.onnx"
    p.write_bytes(data.replace(b"Relu", b"R\xe8lu"))
    with pytest.raises(InputError, match=r"graph.node\[1\]: expected UTF-8"):
        load_model(str(p))

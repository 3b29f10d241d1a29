"""Single-op checks of the converter table against onnx.reference, across opset differences (issue 11).

Each case is one node in a hand-built model: data inputs are graph inputs, shape-like operands are
initializers (so both the build-time folding and the run-time path are exercised elsewhere). Expected
values come from the ReferenceEvaluator (with the spec fixes of _onnx_torch_ref where it diverges).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from tag.deploy.onnx_torch import SUPPORTED_OPS, TorchProgram
from tag.errors import InputError

from _onnx_torch_ref import reference

R = np.random.default_rng(0)
F32 = lambda *s: R.standard_normal(s).astype(np.float32)  # noqa: E731
I64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731


def _model(op, data, consts, attrs=None, opset=13, n_out=1, domain=""):
    """One-node model: ``data`` become graph inputs (named d0, d1, ...), ``consts`` initializers (c0, ...);
    the node reads them in the order given by the keys ('d0', 'c0', '' for omitted)."""
    order = list(data) if isinstance(data, dict) else None
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in data.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    names = [k for k in attrs.pop("_inputs")] if attrs and "_inputs" in attrs else list(data) + list(consts)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"the_{op}", domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    del order
    return m


def _check(op, data, consts=None, attrs=None, opset=13, n_out=1, rtol=1e-5):
    consts = consts or {}
    m = _model(op, data, consts, dict(attrs or {}), opset, n_out)
    want = reference(m).run(None, data)
    prog = TorchProgram(m, data_inputs=list(data), param_names=[])
    got = prog(*[torch.from_numpy(v) for v in data.values()])
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        assert tuple(g.shape) == w.shape
        np.testing.assert_allclose(g.detach().numpy(), w, rtol=rtol, atol=1e-6)


CASES = [
    # opset 9 (light zoo) forms
    ("Upsample", {"d0": F32(1, 2, 3, 4)}, {"c0": np.array([1, 1, 2, 3], np.float32)}, {"mode": "nearest"}, 9, 1),
    ("Dropout", {"d0": F32(2, 5)}, {}, {"ratio": 0.5}, 9, 2),
    ("BatchNormalization", {"d0": F32(2, 3, 4, 4)}, {"c0": F32(3), "c1": F32(3), "c2": F32(3),
                                                    "c3": np.abs(F32(3)) + 0.5}, {"epsilon": 1e-3}, 9, 1),
    ("Reshape", {"d0": F32(2, 3, 4)}, {"c0": I64(0, -1, 2)}, {}, 9, 1),
    ("Softmax", {"d0": F32(2, 3, 4)}, {}, {"axis": 1}, 9, 1),
    ("Softmax", {"d0": F32(2, 3, 4)}, {}, {"axis": 1}, 13, 1),
    ("LRN", {"d0": F32(2, 6, 3, 3)}, {}, {"size": 4, "alpha": 0.01, "beta": 0.75, "bias": 2.0}, 9, 1),
    ("Squeeze", {"d0": F32(2, 1, 3, 1)}, {}, {"axes": [1, -1]}, 11, 1),
    ("Unsqueeze", {"d0": F32(2, 3)}, {}, {"axes": [0, 3]}, 11, 1),
    ("Split", {"d0": F32(2, 7)}, {}, {"axis": 1, "split": [3, 4]}, 11, 2),
    ("Clip", {"d0": F32(3, 4)}, {}, {"min": -0.5, "max": 0.5}, 6, 1),
    ("ReduceMean", {"d0": F32(2, 3, 4)}, {}, {"axes": [1, -1], "keepdims": 0}, 13, 1),
    # opset 13+ / 17 / 18 forms
    ("Squeeze", {"d0": F32(2, 1, 3, 1)}, {"c0": I64(1, -1)}, {}, 13, 1),
    ("Unsqueeze", {"d0": F32(2, 3)}, {"c0": I64(0, 3)}, {}, 13, 1),
    ("Split", {"d0": F32(2, 7)}, {"c0": I64(5, 2)}, {"axis": 1}, 13, 2),
    ("Split", {"d0": F32(2, 7)}, {}, {"axis": 1, "num_outputs": 3}, 18, 3),
    ("ReduceMean", {"d0": F32(2, 3, 4)}, {"c0": I64(1, -1)}, {"keepdims": 1}, 18, 1),
    ("ReduceSum", {"d0": F32(2, 3, 4)}, {"c0": I64(0)}, {"keepdims": 0}, 13, 1),
    ("ReduceMax", {"d0": F32(2, 3, 4)}, {}, {}, 18, 1),
    ("ReduceL2", {"d0": F32(2, 3, 4)}, {"c0": I64(2)}, {}, 18, 1),
    ("LayerNormalization", {"d0": F32(2, 3, 8)}, {"c0": F32(8), "c1": F32(8)}, {"epsilon": 1e-5}, 17, 3),
    ("LayerNormalization", {"d0": F32(2, 3, 8)}, {"c0": F32(3, 8), "c1": F32(3, 8)}, {"axis": 1}, 17, 1),
    ("BatchNormalization", {"d0": F32(2, 3, 5)}, {"c0": F32(3), "c1": F32(3), "c2": F32(3),
                                                 "c3": np.abs(F32(3)) + 0.5}, {}, 15, 1),
    ("Gelu", {"d0": F32(3, 5)}, {}, {"approximate": "tanh"}, 20, 1),
    ("Gelu", {"d0": F32(3, 5)}, {}, {}, 20, 1),
    ("Resize", {"d0": F32(1, 2, 3, 4)}, {"c0": np.array([], np.float32), "c1": np.array([1, 1, 2, 1.5], np.float32)},
     {"mode": "nearest"}, 13, 1),
    ("Resize", {"d0": F32(1, 2, 3, 4)}, {"c0": np.array([], np.float32), "c1": np.array([1, 1, 2, 2], np.float32)},
     {"mode": "linear"}, 13, 1),
    ("Resize", {"d0": F32(1, 2, 3, 4)}, {"c0": np.array([], np.float32), "c1": np.array([1, 1, 2, 3], np.float32)},
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, 13, 1),
    ("Resize", {"d0": F32(1, 2, 3, 4)}, {"c0": np.array([], np.float32), "c1": np.array([1, 1, 3, 3], np.float32)},
     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, 13, 1),
    ("Pad", {"d0": F32(2, 3, 4)}, {"c0": I64(0, 1, 2, 0, 2, 1), "c1": np.array(0.5, np.float32)}, {}, 18, 1),
    ("Pad", {"d0": F32(1, 2, 4, 4)}, {"c0": I64(0, 0, 1, 2, 0, 0, 2, 1)}, {"mode": "reflect"}, 18, 1),
    ("Pad", {"d0": F32(1, 2, 4, 4)}, {"c0": I64(0, 0, 1, 2, 0, 0, 2, 1)}, {"mode": "edge"}, 18, 1),
    ("Slice", {"d0": F32(5, 6)}, {"c0": I64(-1, 1), "c1": I64(-10, 100), "c2": I64(0, 1), "c3": I64(-2, 2)}, {}, 13, 1),
    ("Slice", {"d0": F32(5, 6)}, {"c0": I64(1), "c1": I64(-1), "c2": I64(-1)}, {}, 13, 1),
    ("Gather", {"d0": F32(4, 5, 3)}, {"c0": I64(-1, 0, 2, 2).reshape(2, 2)}, {"axis": 1}, 13, 1),
    ("GatherElements", {"d0": F32(3, 4)}, {"c0": I64(0, 3, -1, 1, 2, 2).reshape(3, 2)}, {"axis": 1}, 13, 1),
    ("Expand", {"d0": F32(3, 1)}, {"c0": I64(2, 1, 4)}, {}, 13, 1),
    ("Tile", {"d0": F32(2, 3)}, {"c0": I64(2, 2)}, {}, 13, 1),
    ("Transpose", {"d0": F32(2, 3, 4)}, {}, {"perm": [2, 0, 1]}, 13, 1),
    ("Flatten", {"d0": F32(2, 3, 4)}, {}, {"axis": 2}, 13, 1),
    ("Concat", {"d0": F32(2, 3), "d1": F32(2, 2)}, {}, {"axis": -1}, 13, 1),
    ("Where", {"d0": F32(3, 4) > 0, "d1": F32(3, 4)}, {"c0": F32(4)}, {}, 13, 1),
    ("Conv", {"d0": F32(1, 4, 7, 6)}, {"c0": F32(6, 2, 3, 2), "c1": F32(6)},
     {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}, 13, 1),
    ("Conv", {"d0": F32(1, 2, 7, 7)}, {"c0": F32(3, 2, 3, 3)}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 13, 1),
    ("ConvTranspose", {"d0": F32(1, 4, 3, 3)}, {"c0": F32(4, 2, 3, 3), "c1": F32(2)},
     {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]}, 13, 1),
    ("MaxPool", {"d0": F32(1, 2, 7, 7)}, {}, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}, 13, 1),
    ("MaxPool", {"d0": F32(1, 2, 6, 6)}, {}, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 13, 1),
    ("AveragePool", {"d0": F32(1, 2, 6, 6)}, {}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 13, 1),
    ("AveragePool", {"d0": F32(1, 2, 6, 6)}, {}, {"kernel_shape": [3, 3], "pads": [0, 1, 2, 1],
                                                 "count_include_pad": 1}, 13, 1),
    ("GlobalAveragePool", {"d0": F32(2, 3, 4, 5)}, {}, {}, 13, 1),
    ("InstanceNormalization", {"d0": F32(2, 3, 4, 5)}, {"c0": F32(3), "c1": F32(3)}, {}, 13, 1),
    ("Gemm", {"d0": F32(3, 4)}, {"c0": F32(5, 4), "c1": F32(5)}, {"transB": 1, "alpha": 0.5, "beta": 2.0}, 13, 1),
    ("MatMul", {"d0": F32(2, 3, 4)}, {"c0": F32(4, 5)}, {}, 13, 1),
    ("Einsum", {"d0": F32(2, 3, 4), "d1": F32(2, 4, 5)}, {}, {"equation": "bij,bjk->bik"}, 13, 1),
    ("CumSum", {"d0": F32(3, 4)}, {"c0": np.array(1, np.int64)}, {"exclusive": 1, "reverse": 1}, 13, 1),
    ("TopK", {"d0": F32(3, 6)}, {"c0": I64(2)}, {"axis": 1}, 13, 2),
    ("Trilu", {"d0": F32(4, 4)}, {"c0": I64(1)}, {"upper": 0}, 14, 1),
    ("Mod", {"d0": I64(7, -7, 5)}, {"c0": I64(3, 3, -2)}, {}, 13, 1),
    ("Div", {"d0": I64(7, 9, 4)}, {"c0": I64(2, 3, 4)}, {}, 13, 1),
    ("Pow", {"d0": F32(3, 4)}, {"c0": np.array(2, np.int64)}, {}, 15, 1),
    ("Erf", {"d0": F32(3, 4)}, {}, {}, 13, 1),
    ("HardSigmoid", {"d0": F32(3, 4)}, {}, {"alpha": 0.3}, 13, 1),
    ("LeakyRelu", {"d0": F32(3, 4)}, {}, {"alpha": 0.2}, 13, 1),
    ("ArgMax", {"d0": F32(3, 4)}, {}, {"axis": 1, "keepdims": 0}, 13, 1),
    ("DepthToSpace", {"d0": F32(1, 8, 2, 3)}, {}, {"blocksize": 2, "mode": "CRD"}, 13, 1),
    ("ScatterND", {"d0": F32(4, 3)}, {"c0": I64(2, 0).reshape(2, 1), "c1": F32(2, 3)}, {}, 13, 1),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-op{c[4]}-{i}" for i, c in enumerate(CASES)])
def test_op_matches_reference(case):
    op, data, consts, attrs, opset, n_out = case
    _check(op, data, consts, attrs, opset, n_out)


def test_shape_family_follows_rows():
    """Reshape target = Concat(Gather(Shape(x), 0), [-1]) computed on the rows at hand, then ConstantOfShape
    and Range of that shape: 3 and 5 rows give targets [3, -1] and [5, -1]."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero_s"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]), helper.make_node("Concat", ["b1", "minus1"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"]), helper.make_node("ConstantOfShape", ["b1"], ["z"]),
             helper.make_node("Range", ["zero_s", "b", "one_s"], ["r"])]
    inits = [numpy_helper.from_array(I64(0), "zero"), numpy_helper.from_array(I64(-1), "minus1"),
             numpy_helper.from_array(np.array(0, np.int64), "zero_s"), numpy_helper.from_array(np.array(1, np.int64), "one_s")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, 3])],
                          [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("y", "z", "r")], inits)
    prog = TorchProgram(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    for rows in (3, 5):
        y, z, r = prog(torch.randn(rows, 2, 3))
        assert tuple(y.shape) == (rows, 6) and tuple(z.shape) == (rows,) and r.tolist() == list(range(rows))


def test_unsupported_op_is_a_clear_error():
    m = _model("NonMaxSuppression", {"d0": F32(1, 4, 4), "d1": F32(1, 1, 4)}, {}, {}, 13)
    with pytest.raises(InputError) as e:
        TorchProgram(m, model_path="m.onnx")
    assert str(e.value).startswith("m.onnx: node 'the_NonMaxSuppression' (NonMaxSuppression): expected an op type the converter supports")
    m = _model("Resize", {"d0": F32(1, 1, 2, 2)}, {"c0": np.array([], np.float32), "c1": np.array([1, 1, 2, 2], np.float32)},
               {"mode": "cubic"}, 13)
    prog = TorchProgram(m, data_inputs=["d0"], param_names=[], model_path="m.onnx")
    with pytest.raises(InputError, match=r"node 'the_Resize' \(Resize\).*cubic"):
        prog(torch.randn(1, 1, 2, 2))


def _weights_as_inputs_model():
    """x [n, 4] -> Gemm(W1 [6, 4], transB) + b1 -> LayerNorm(g, beta) -> MatMul(W2 [6, 3]); Conv branch: W3."""
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1),
             helper.make_node("LayerNormalization", ["h", "g", "beta"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "W2"], ["y"]),
             helper.make_node("Conv", ["img", "W3"], ["c"])]
    vi = helper.make_tensor_value_info
    ins = [vi("x", TensorProto.FLOAT, ["n", 4]), vi("img", TensorProto.FLOAT, ["n", 2, 5, 5]),
           vi("W1", TensorProto.FLOAT, [6, 4]), vi("b1", TensorProto.FLOAT, [6]), vi("g", TensorProto.FLOAT, [6]),
           vi("beta", TensorProto.FLOAT, [6]), vi("W2", TensorProto.FLOAT, [6, 3]), vi("W3", TensorProto.FLOAT, [7, 2, 3, 3])]
    g = helper.make_graph(nodes, "g", ins, [vi("y", TensorProto.FLOAT, None), vi("c", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_fresh_initialisation_seeded_and_fan_in_scaled():
    m = _weights_as_inputs_model()
    a, b, c = TorchProgram(m, seed=0), TorchProgram(m, seed=0), TorchProgram(m, seed=1)
    assert a.data_inputs == ["x", "img"] and set(a.param_names) == {"W1", "b1", "g", "beta", "W2", "W3"}
    for name in a.param_names:
        torch.testing.assert_close(a.param(name), b.param(name))  # every rank builds the same values
    assert not torch.equal(a.param("W1"), c.param("W1"))
    fan_in = {"W1": 4, "W2": 6, "W3": 2 * 3 * 3}  # Gemm transB: in = dim 1; MatMul B: dim 0; Conv: C_in x k x k
    for name, f in fan_in.items():
        w = a.param(name).detach()
        bound = 1 / math.sqrt(f)
        assert w.abs().max() <= bound and w.abs().max() > 0.5 * bound and w.std() > 0.2 * bound
    assert torch.equal(a.param("b1"), torch.zeros(6)) and torch.equal(a.param("beta"), torch.zeros(6))
    assert torch.equal(a.param("g"), torch.ones(6))
    y, conv = a(torch.randn(2, 4), torch.randn(2, 2, 5, 5))
    assert tuple(y.shape) == (2, 3) and tuple(conv.shape) == (2, 7, 3, 3)


def test_parameters_are_keyed_by_onnx_name_with_unsafe_characters():
    names = ["layer.0/w:0", "layer_0_w_0", "training"]  # the first two sanitise alike; a Module attribute name
    nodes = [helper.make_node("Add", ["x", names[0]], ["a"]), helper.make_node("Mul", ["a", names[1]], ["b"]),
             helper.make_node("Sub", ["b", names[2]], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.arange(3, dtype=np.float32) + k, n) for k, n in enumerate(names)])
    prog = TorchProgram(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert prog.param_names == names and len(set(prog.params.keys())) == 3
    assert prog.param(names[0]).tolist() == [0.0, 1.0, 2.0] and prog.param(names[2]).tolist() == [2.0, 3.0, 4.0]
    y = prog(torch.ones(2, 3))  # y = (x + w0) * w1 - w2
    torch.testing.assert_close(y[0], torch.tensor([1.0 * 1 - 2, 2.0 * 2 - 3, 3.0 * 3 - 4]))
    y.sum().backward()
    assert prog.param(names[0]).grad.tolist() == [2.0, 4.0, 6.0]  # d/dw0 = 2 rows x w1
    assert prog.param(names[2]).grad.tolist() == [-2.0, -2.0, -2.0]


def test_coverage_doc_lists_every_converter():
    import os
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "converter-coverage.md")).read()
    missing = [op for op in SUPPORTED_OPS if f"`{op}`" not in doc]
    assert not missing


def test_node_order_matches_the_graph_loader_on_a_shuffled_file():
    """Without an OpGraph the program orders nodes by the same stable topological rule as tag.graph.load
    (its `_topological`; load_model itself needs a sorted file for shape inference), and with the OpGraph of
    the sorted file it follows OpGraph.ops."""
    import os
    import random

    from tag.graph.load import _topological, load_model

    path = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "bert_tiny.onnx")
    model = onnx.load(path)
    assert [n.outputs for n in TorchProgram(model, load_model(path)).nodes] == [
        op.outputs for op in load_model(path).ops]
    nodes = list(model.graph.node)
    random.Random(4).shuffle(nodes)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    prog = TorchProgram(model)
    assert [n.outputs for n in prog.nodes] == [list(n.output) for n in _topological(list(model.graph.node))]
    seen = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | {""}
    for n in prog.nodes:  # and it is a topological order
        assert all(x in seen for x in n.inputs), n.name
        seen.update(n.outputs)

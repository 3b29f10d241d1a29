"""Loader robustness: files out of topological order, cycles, control flow, missing external data."""

import os
import random

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tag.errors import InputError
from tag.graph import load_model
from tag.graph.toposort import stable_topological_order
from tests.graph.helpers_graph import F, save, w

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")


def _shuffled(src, dst, seed):
    model = onnx.load(src)
    nodes = list(model.graph.node)
    random.Random(seed).shuffle(nodes)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, dst)
    return model


def _brute_is_topological(nodes):
    """Independent check: every input produced by a node is produced by an earlier one."""
    produced_by = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    return all(produced_by.get(x, -1) < i for i, n in enumerate(nodes) for x in n.input if x in produced_by)


@pytest.mark.parametrize("name", ["light_squeezenet.onnx", "light_zfnet512.onnx"])
def test_shuffled_light_model_loads_like_the_ordered_file(tmp_path, name):
    src = os.path.join(LIGHT, name)
    _shuffled(src, str(tmp_path / name), seed=3)
    a, b = load_model(src), load_model(str(tmp_path / name))
    assert len(b.ops) == len(a.ops) == len(onnx.load(src).graph.node)
    assert b.param_count == a.param_count
    fa = sum(op.fwd_flops_per_row for op in a.ops), sum(op.fwd_flops_fixed for op in a.ops)
    fb = sum(op.fwd_flops_per_row for op in b.ops), sum(op.fwd_flops_fixed for op in b.ops)
    assert fb == pytest.approx(fa) and fa[0] > 0
    assert sorted(op.op_type for op in a.ops) == sorted(op.op_type for op in b.ops)
    assert b.batch_constants == a.batch_constants
    seen = set(b.data_inputs) | {n for n, t in b.tensors.items() if t.producer is None}
    for op in b.ops:  # OpGraph.ops is a topological order
        assert all(x in seen for x in op.inputs if x), op.name
        seen.update(op.outputs)


def test_stable_order_matches_brute_force_on_random_dags():
    """On random DAGs in random file order: the result is topological, and it is the lexicographically
    smallest topological order (brute force over the ready set by hand)."""
    rng = random.Random(7)
    for _ in range(30):
        n = rng.randint(1, 12)
        edges = {(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.3}
        perm = list(range(n))
        rng.shuffle(perm)  # file position of dag node k is perm[k]
        nodes = [None] * n
        for k in range(n):
            ins = [f"t{u}" for u, v in sorted(edges) if v == k] or ["x"]
            nodes[perm[k]] = helper.make_node("Sum", ins, [f"t{k}"], name=f"n{k}")
        order = stable_topological_order(nodes)
        assert sorted(order) == list(range(n))
        assert _brute_is_topological([nodes[i] for i in order])
        done, expect = set(), []
        deps = {perm[v]: {perm[u] for u, vv in edges if vv == v} for v in range(n)}
        while len(expect) < n:
            nxt = min(i for i in range(n) if i not in done and deps[i] <= done)
            expect.append(nxt)
            done.add(nxt)
        assert order == expect


def test_cycle_is_an_input_error(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second")]
    p = save(tmp_path, nodes, [("x", F, [2, 3])], [("b", F, [2, 3])])
    with pytest.raises(InputError) as e:
        load_model(p)
    assert p in str(e.value) and "cycle" in str(e.value) and "node '" in str(e.value)


def _branch(out, op):
    return helper.make_graph([helper.make_node(op, ["x"], [out])], f"g_{op}", [], [helper.make_tensor_value_info(out, F, None)])


def test_if_is_a_clear_input_error(tmp_path):
    nodes = [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=_branch("t", "Relu"),
                              else_branch=_branch("e", "Sigmoid"))]
    p = save(tmp_path, nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], inits=[("c", np.array(True))])
    with pytest.raises(InputError) as e:
        load_model(p)
    msg = str(e.value)
    assert msg.startswith(p) and "node 'branch' (If)" in msg and "control flow" in msg and "\n" not in msg


def test_loop_is_a_clear_input_error(tmp_path):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Relu", ["v_in"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", F, None)],
        [helper.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, None)])
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["y"], name="repeat", body=body)]
    p = save(tmp_path, nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], inits=[("n", np.array(3, np.int64))])
    with pytest.raises(InputError, match=r"node 'repeat' \(Loop\).*control flow"):
        load_model(p)


def _external_model(tmp_path, length_bytes=None):
    weight = numpy_helper.from_array(w(3, 4), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 4])], initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.external_data_helper.convert_model_to_external_data(model, location="weights.bin", size_threshold=0)
    p = str(tmp_path / "ext.onnx")
    onnx.save(model, p)
    return p


def test_external_data_present_loads(tmp_path):
    g = load_model(_external_model(tmp_path))
    assert g.param_count == 12


def test_external_data_missing_is_an_input_error(tmp_path):
    p = _external_model(tmp_path)
    os.remove(tmp_path / "weights.bin")
    with pytest.raises(InputError) as e:
        load_model(p)
    assert "initializer 'W'" in str(e.value) and "weights.bin" in str(e.value) and "no such file" in str(e.value)


def test_external_data_truncated_is_an_input_error(tmp_path):
    p = _external_model(tmp_path)
    with open(tmp_path / "weights.bin", "r+b") as f:
        f.truncate(20)  # 48 bytes expected
    with pytest.raises(InputError, match="initializer 'W'.*20 bytes"):
        load_model(p)


def test_external_data_outside_the_model_directory_is_an_input_error(tmp_path):
    p = _external_model(tmp_path)
    model = onnx.load(p, load_external_data=False)
    for e in model.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = "../weights.bin"
    onnx.save(model, p)
    with pytest.raises(InputError, match="inside the model's directory"):
        load_model(p)


def test_cli_control_flow_exit_2_one_line(tmp_path, capsys):
    from tag.cli import main

    nodes = [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=_branch("t", "Relu"),
                              else_branch=_branch("e", "Sigmoid"))]
    p = save(tmp_path, nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], inits=[("c", np.array(True))])
    rc = main(["inspect", p])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "" and cap.err.count("\n") == 1 and "node 'branch' (If)" in cap.err


def test_cli_shuffled_model_same_summary(tmp_path, capsys):
    import json

    from tag.cli import main

    src = os.path.join(LIGHT, "light_squeezenet.onnx")
    _shuffled(src, str(tmp_path / "s.onnx"), seed=11)
    out = []
    for p in (src, str(tmp_path / "s.onnx")):
        assert main(["inspect", p, "--json"]) == 0
        out.append(json.loads(capsys.readouterr().out))
    for key in ("ops", "params", "forward_flops_per_sample", "batch_size"):
        assert out[0][key] == out[1][key], key

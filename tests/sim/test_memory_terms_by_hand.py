"""tag.sim.memory on a real (tiny) op graph, worked out by hand: bucketed gradients, the weight-gradient temporary,
output-gradient buffers waiting for their producer, and the dtypes of bf16 autocast (tag.graph.autocast).

The graph: x[n, 4] -> Gemm(W 4x4, b 4, transB) -> h; Relu(h) -> r; Add(h, r) -> y, one op per group, so h has two
consumers (a residual). Parameters: 16 + 4 floats, P = 80 bytes, the largest weight W 64 bytes. SGD: no optimizer
states, no step temporaries. fp32: x, h, r, y are 16 bytes per row.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tag.cost.roofline import RooflineCostModel
from tag.graph import load_model
from tag.sim.context import SimContext
from tag.sim.memory import peak_memory_bytes
from tag.strategy import Decision, TrainingConfig
from tag.strategy.regroup import groupgraph_from_plan
from tag.topology.loader import parse_topology

P = 80.0


def _setup(tmp_path, n_dev: int, precision: str = "fp32"):
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["h"], name="gemm", transB=1),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Add", ["h", "r"], ["y"], name="add")]
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        initializer=[numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
                     numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
    path = tmp_path / "res.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    g = load_model(str(path), batch_size=10)
    gg = groupgraph_from_plan(g, [["gemm"], ["relu"], ["add"]])
    cluster = parse_topology({"version": 1, "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": n_dev}]}]},
                             "cpus")
    training = TrainingConfig("sgd", precision=precision)
    ctx = SimContext(gg, cluster, RooflineCostModel(gg, training), training)
    return ctx


def _peak(ctx, rows, precision="fp32"):
    decisions = [Decision(rows, sync="ring" if sum(1 for r in rows if r) > 1 else None)] * 3
    n = len(rows)
    return list(peak_memory_bytes(ctx, decisions, [], "sgd", np.zeros(n), precision))


def test_one_device_residual_fp32(tmp_path):
    # 10 rows: x, h, r, y 160 B each. Static: P = 80; the data rows x: 160. Held to each backward: gemm its output h
    # (x is data), relu r, add y: 160 each. Forward peak: 480 + y 160 = 640. add's backward: all held (480) + y's
    # gradient (160) + its input gradients of h and r (320) + the gradient buffers of h and r that it fills for
    # gemm and relu (320) = 1280; relu's: 320 + 160 + 160 + h's buffer 160 = 800; gemm's: 160 + G 80 + 160 = 400.
    ctx = _setup(tmp_path, 1)
    assert _peak(ctx, (10,)) == [pytest.approx(P + 160 + 1280)]


def test_two_replicas_bucketed_gradient_and_temporary(tmp_path):
    # 5 rows each: activations 80 B. Replicated with a sync: the gradient lives in its bucket for good (static
    # P + G = 160), and gemm's backward adds W's fresh gradient (64 B) into it. add's backward: 240 + 80 + 160 + 160
    # = 640 is the peak (gemm's: 80 + 80 + 64 = 224).
    ctx = _setup(tmp_path, 2)
    assert _peak(ctx, (5, 5)) == [pytest.approx(2 * P + 80 + 640)] * 2


def test_one_device_residual_bf16(tmp_path):
    # bf16 autocast, 10 rows. gemm: its product is bf16, + the fp32 bias vector: h fp32 (160); it saves a bf16 copy
    # of x (80; W's copy is not saved: x needs no gradient). relu reads h as a bf16 leaf (a copy: 80) and keeps r
    # (bf16, 80). add reads h as another bf16 leaf copy (80) and r as is; y = bf16 + bf16 (80).
    # held: gemm 80 + 160 = 240, relu 80 + 80 = 160, add 80 + 80 = 160; cumulated 240, 400, 560.
    # add's backward: 560 + y's gradient 80 + input gradients at the leaves' bf16 (160) + buffers of h (fp32, 160)
    # and r (bf16, 80) = 1040. Forward: 560 + 80 = 640. relu's backward: 400 + 80 + 80 + 160 = 720.
    ctx = _setup(tmp_path, 1, "bf16")
    assert _peak(ctx, (10,), "bf16") == [pytest.approx(P + 160 + 1040)]

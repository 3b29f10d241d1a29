"""tag.sim.memory: a ZeRO 2-3 bucket's full gradients wait for its one reduce-scatter (issue 27, `tag.deploy.zero`).

The graph: x[n, 4] -> Gemm(W1 4x4, b1 4) -> h -> Gemm(W2 4x4, b2 4) -> y, one Gemm per group, both on 2 replicas at
ZeRO 2 (or 3). Each group's parameters: 20 floats, P = 80 bytes; its full gradient beyond its shard: 80 - 80 / 2 =
40 bytes. In one bucket [1, 0] the reduce-scatter runs after group 0's backward, so group 1's full gradient is
still held during it: group 0's backward transient is 40 bytes higher on each device, group 1's unchanged. In two
buckets [1], [0] nothing waits.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tag.cost.roofline import RooflineCostModel
from tag.graph import load_model
from tag.sim.context import SimContext
from tag.sim.memory import memory_terms
from tag.strategy import Decision, TrainingConfig
from tag.strategy.regroup import groupgraph_from_plan
from tag.topology.loader import parse_topology


def _ctx(tmp_path):
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
            for n, s in (("W1", (4, 4)), ("b1", (4,)), ("W2", (4, 4)), ("b2", (4,)))]
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="g1", transB=1),
             helper.make_node("Gemm", ["h", "W2", "b2"], ["y"], name="g2", transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], initializer=init)
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    gg = groupgraph_from_plan(load_model(str(path), batch_size=10), [["g1"], ["g2"]])
    cluster = parse_topology({"version": 1, "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 2}]}]},
                             "cpus")
    training = TrainingConfig("sgd")
    return SimContext(gg, cluster, RooflineCostModel(gg, training), training)


@pytest.mark.parametrize("zero", [2, 3])
def test_a_zero_bucket_holds_its_groups_full_gradients_until_its_reduce_scatter(tmp_path, zero):
    ctx = _ctx(tmp_path)
    assert list(ctx.param_bytes) == [80.0, 80.0]
    decisions = [Decision((5, 5), "ring", zero=zero)] * 2
    alone = memory_terms(ctx, decisions, [], "sgd").bwd_transient
    split = memory_terms(ctx, decisions, [], "sgd", buckets=[(1,), (0,)]).bwd_transient
    one = memory_terms(ctx, decisions, [], "sgd", buckets=[(1, 0)]).bwd_transient
    np.testing.assert_allclose(split, alone)
    np.testing.assert_allclose(one - alone, [[40.0, 40.0], [0.0, 0.0]])

"""Training-mode BatchNormalization split by rows: the simulator charges deploy's batch-statistics all-reduces
(`tag.sim.batch_stats`), against times worked out by hand."""

import pytest

from simkit_builders import FixedCost, make_cluster
from tag.graph.groups import Group, GroupEdge, GroupGraph
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.pipeline import Pipeline, Stage

TC = TrainingConfig(optimizer="adam")
INTRA_BPMS = 80e9 / 8 / 1e3  # 1e7 bytes per ms
INTRA_LAT_MS = 2 * 1e-3  # route latency of two 1-us device links
C = 2_499_999  # channels: the two forward all-reduces carry 4 (C + 1) = 1e7 and 4 C = 9999996 bytes


def _gg(training_mode: int) -> GroupGraph:
    # group 0: a MatMul; group 1: a BatchNormalization with C channels (its scale input says so)
    ops = [Op("mm", "MatMul", "", ["x", "w"], ["h"], op_class="matmul"),
           Op("bn", "BatchNormalization", "", ["h", "scale", "bias", "mean", "var"], ["y"], op_class="norm",
              attrs={"training_mode": training_mode})]
    tensors = {"scale": TensorInfo("scale", "float32", (C,), role="param")}
    graph = OpGraph("test.onnx", ops, tensors, [], [], [], 1, 1)
    groups = [Group(id=0, op_ids=[0], splittable=True), Group(id=1, op_ids=[1], splittable=True)]
    return GroupGraph(graph, groups, [GroupEdge(0, 1, ["h"], 0.0, 0.0)])


def _ring2(nbytes):
    """Ring all-reduce on 2 devices of one machine: 2 (n-1)/n x S = S per hop at 1e7 bytes/ms, 2 latency steps."""
    return nbytes / INTRA_BPMS + 2 * INTRA_LAT_MS


STATS_MS = _ring2(4 * (C + 1)) + _ring2(4 * C)  # one pass: (C + 1) floats, then C floats


def test_split_training_bn_pays_two_allreduces_each_way():
    # both groups 4 + 4 rows on 2 devices, 1 ms per row: F0 0-4, F1 4-8, then the forward statistics (STATS_MS)
    # hold back B1: 8 + S to 16 + S; the backward statistics hold back B0: 16 + 2S to 24 + 2S.
    cl = make_cluster([2])
    st = Strategy((Decision((4, 4)), Decision((4, 4))))
    r = simulate(_gg(1), cl, FixedCost([1.0, 1.0]), st, TC, trace=True)
    assert r.iteration_ms == pytest.approx(24 + 2 * STATS_MS)
    fused = simulate(_gg(1), cl, FixedCost([1.0, 1.0]), st, TC)
    assert fused.iteration_ms == r.iteration_ms
    # each direction of the device links carries every all-reduce's per-hop volume once
    assert r.link_bytes["m0/0->m0"] == pytest.approx(2 * (4 * (C + 1) + 4 * C))
    names = {e["name"] for e in r.trace_events if e["ph"] == "X" and e["pid"] == 1}
    assert names == {"sync bn-stats g1 fwd", "sync bn-stats g1 bwd"}


def test_inference_bn_or_one_replica_pays_nothing():
    cl = make_cluster([2])
    st = Strategy((Decision((4, 4)), Decision((4, 4))))
    assert simulate(_gg(0), cl, FixedCost([1.0, 1.0]), st, TC).iteration_ms == pytest.approx(24)
    one = Strategy((Decision((8, 0)), Decision((8, 0))))
    assert simulate(_gg(1), cl, FixedCost([1.0, 1.0]), one, TC).iteration_ms == pytest.approx(48)


def test_pipeline_with_one_micro_batch_charges_them_too():
    # one stage, m = 1: the same iteration as without pipelining
    cl = make_cluster([2])
    decs = (Decision((4, 4)), Decision((4, 4)))
    st = Strategy(decs, pipeline=Pipeline((Stage((0, 1), (0, 1)),), 1, "1f1b"))
    assert simulate(_gg(1), cl, FixedCost([1.0, 1.0]), st, TC).iteration_ms == pytest.approx(24 + 2 * STATS_MS)

"""A tensor read by two groups on one device crosses to it once (issue 21), worked by hand.

The toy: op0 (group 0) makes h, 250,000 float32 per row = 1e6 bytes per row; op1 (group 1) reads h and makes y
(1 float per row); op2 (group 2) reads h and y. Group 0 on device 0, groups 1 and 2 on device 1 (one machine, 80
Gbit/s = 1e7 bytes/ms device links, no latency), global batch 4: h is 4e6 bytes. FixedCost: forward 1 ms per row
(4 ms a pass), backward 8 ms.

Per edge (before): h went twice each way (edges 0->1 and 0->2), 4 messages, 16e6 bytes on the wire; the two
forward copies share the links (0.5e7 bytes/ms each), both arrive at 4 + 4e6 / 0.5e7 = 4.8 ms.
Per tensor (now): h goes once each way, 2 messages, 8e6 bytes: it arrives at 4 + 4e6 / 1e7 = 4.4 ms and
delivers to both readers. Device 1: F1 4.4-8.4, F2 8.4-12.4, B2 12.4-20.4, B1 20.4-28.4; the summed gradient of
h leaves after B1 (the lower reader's backward, the last of the two) at 28.4 and arrives at 28.8; device 0's B0
runs 28.8-36.8. The iteration ends at 36.8 ms (no optimizer time).
"""

import pytest

from simkit_builders import FixedCost, make_cluster
from tag.graph.coarsen import build_group_graph, cross_tensors
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.sim import simulate
from tag.sim.build import build_task_graph
from tag.sim.context import sim_context
from tag.sim.memory import received_bytes
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.pipeline import Pipeline, Stage

TC = TrainingConfig(optimizer="sgd")
H_BYTES_PER_ROW = 1e6


def _toy():
    ops = [Op("op0", "Relu", "", ["x"], ["h"], op_class="elementwise"),
           Op("op1", "Relu", "", ["h"], ["y"], op_class="elementwise"),
           Op("op2", "Add", "", ["h", "y"], ["z"], op_class="elementwise")]
    tensors = {"x": TensorInfo("x", "float32", (1, 250_000), 0, "data", None, [0]),
               "h": TensorInfo("h", "float32", (1, 250_000), 0, "activation", 0, [1, 2]),
               "y": TensorInfo("y", "float32", (1, 1), 0, "activation", 1, [2]),
               "z": TensorInfo("z", "float32", (1, 250_000), 0, "activation", 2, [])}
    graph = OpGraph("toy.onnx", ops, tensors, ["x"], [], ["z"], 1, 4)
    return build_group_graph(graph, [0, 1, 2], [[0], [1], [2]])


def _strategy():
    return Strategy((Decision((4, 0)), Decision((0, 4)), Decision((0, 4))))


def test_the_tensor_is_one_tensor_with_two_readers():
    gg = _toy()
    assert [(e.src, e.dst, e.tensors, e.bytes_per_row) for e in gg.edges] == \
        [(0, 1, ["h"], 1e6), (0, 2, ["h"], 1e6), (1, 2, ["y"], 4.0)]
    assert [(t.name, t.src, t.dsts, t.bytes_per_row) for t in cross_tensors(gg)] == \
        [("h", 0, (1, 2), 1e6), ("y", 1, (2,), 4.0)]


def test_one_message_each_way_delivers_to_both_readers():
    gg, cl = _toy(), make_cluster([2], dev_lat_us=0.0)
    ctx = sim_context(gg, cl, FixedCost([1.0, 1.0, 1.0]), TC)
    tg = build_task_graph(ctx, _strategy())
    h = [x for x in tg.transfers if x.spec.volume_bytes == 4e6]
    assert len(h) == 2  # was 4
    fwd, bwd = h
    assert [tg.tasks.group[k] for k in fwd.deliver] == [1, 2]
    assert [tg.tasks.group[k] for k in bwd.wait] == [1, 2] and tg.tasks.group[bwd.deliver[0]] == 0
    assert sum(x.spec.volume_bytes for x in tg.transfers) == 8e6  # y stays on device 1


def test_bytes_and_times_per_iteration():
    gg, cl = _toy(), make_cluster([2], dev_lat_us=0.0)
    r = simulate(gg, cl, FixedCost([1.0, 1.0, 1.0]), _strategy(), TC, trace=True)
    assert r.link_bytes["m0/0->m0"] == pytest.approx(4e6) and r.link_bytes["m0->m0/1"] == pytest.approx(4e6)
    assert r.link_bytes["m0/1->m0"] == pytest.approx(4e6) and r.link_bytes["m0->m0/0"] == pytest.approx(4e6)
    starts = sorted((e["ts"] / 1e3, e["name"].split()[0] + " " + e["name"].split()[1])
                    for e in r.trace_events if e["ph"] == "X" and e["pid"] == 0)
    assert [(round(t, 6), n) for t, n in starts] == [(0.0, "fwd g0"), (4.4, "fwd g1"), (8.4, "fwd g2"),
                                                     (12.4, "bwd g2"), (20.4, "bwd g1"), (28.8, "bwd g0")]
    assert r.iteration_ms == pytest.approx(36.8)


def test_the_memory_pass_receives_it_once():
    gg, cl = _toy(), make_cluster([2], dev_lat_us=0.0)
    ctx = sim_context(gg, cl, FixedCost([1.0, 1.0, 1.0]), TC)
    recv = build_task_graph(ctx, _strategy()).memory.recv
    assert recv == [(1, 1, 0, 0, 4e6)]  # held by the lower reader, group 1 (was also (2, 1, 0, 0, 4e6))
    fwd, bwd = received_bytes(recv, (3, 2))
    assert fwd[1, 1] == 4e6 and fwd[2, 1] == 0.0 and bwd[0, 0] == 4e6  # bwd[0, 0] was 8e6


def test_a_pipeline_sends_it_once_per_micro_batch():
    # stages {0} on device 0 and {1, 2} on device 1, m = 2: per micro-batch h is 2 rows = 2e6 bytes, once each way
    gg, cl = _toy(), make_cluster([2], dev_lat_us=0.0)
    st = Strategy(_strategy().decisions, pipeline=Pipeline((Stage((0,), (0,)), Stage((1, 2), (1,))), 2, "gpipe"))
    ctx = sim_context(gg, cl, FixedCost([1.0, 1.0, 1.0]), TC)
    tg = build_task_graph(ctx, st)
    h = [x for x in tg.transfers if x.spec.volume_bytes == 2e6]
    assert len(h) == 4  # 2 micro-batches x (activation, gradient); per edge it was 8
    assert tg.memory.recv == [(1, 1, 0, 0, 2e6)]
    r = simulate(gg, cl, FixedCost([1.0, 1.0, 1.0]), st, TC)
    assert r.link_bytes["m0/0->m0"] == pytest.approx(4e6)  # 2 x 2e6, was 8e6

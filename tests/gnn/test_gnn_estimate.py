"""The critical-path estimate (`tag.gnn.estimate`) against hand-worked timelines and the simulator."""

from __future__ import annotations

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sim"))

from simkit_builders import FixedCost, make_cluster, make_gg  # noqa: E402
from tag.gnn.estimate import estimate  # noqa: E402
from tag.sim import simulate  # noqa: E402
from tag.strategy import Decision, Strategy, TrainingConfig  # noqa: E402

TC = TrainingConfig(optimizer="adam")
INTRA_BPMS = 80e9 / 8 / 1e3  # 80 Gbit/s in bytes per ms
INTRA_LAT_MS = 2e-3  # two 1-us device links
NIC_BPMS = 8e9 / 8 / 1e3
INTER_LAT_MS = (1 + 4 + 4 + 1) * 1e-3


def test_one_device_is_the_sum_of_its_tasks():
    cl = make_cluster([1])
    gg = make_gg([dict(param_bytes=100, param_count=25), dict(), dict(param_bytes=40, param_count=10)],
                 [(0, 1, 8.0, 0.0), (1, 2, 8.0, 0.0)])
    cost = FixedCost([1.0, 2.0, 3.0], [0.5, 0.0, 0.25])
    st = Strategy(tuple(Decision((4,)) for _ in range(3)))
    e = estimate(gg, cl, cost, st, TC)
    assert e.iteration_ms == pytest.approx(4 * 6 + 8 * 6 + 0.5 + 0.25)
    assert e.busiest_compute_ms == pytest.approx(4 * 6 + 8 * 6)
    assert e.sync_busy_ms == 0 and e.transfer_busy_ms == 0


def test_two_stage_placement_by_hand():
    # g0 on m0/0, g1 on m1/0; 4 rows x 1e5 bytes cross the NIC route each way.
    cl = make_cluster([1, 1])
    gg = make_gg([dict(param_bytes=8, param_count=2), dict(param_bytes=8, param_count=2)], [(0, 1, 1e5, 0.0)])
    cost = FixedCost([1.0, 3.0], [0.5, 0.7])
    st = Strategy((Decision((4, 0)), Decision((0, 4))))
    xfer = 4e5 / NIC_BPMS + INTER_LAT_MS
    # fwd0 0-4, act, fwd1 (12 ms), bwd1 (24 ms), grad back, bwd0 (8 ms), update of g0 on m0/0
    expected = 4 + xfer + 12 + 24 + xfer + 8 + 0.5
    e = estimate(gg, cl, cost, st, TC)
    assert e.iteration_ms == pytest.approx(expected)
    assert e.transfer_busy_ms == pytest.approx(2 * 4e5 / NIC_BPMS)
    assert e.iteration_ms == pytest.approx(simulate(gg, cl, cost, st, TC).iteration_ms)


def test_data_parallel_ring_by_hand():
    cl = make_cluster([2])
    S = 4e6
    gg = make_gg([dict(param_bytes=S, param_count=int(S / 4))], [])
    st = Strategy((Decision((4, 4), sync="allreduce"),))
    ring = 2 * (2 - 1) / 2 * S / INTRA_BPMS + 2 * INTRA_LAT_MS
    e = estimate(gg, cl, FixedCost([1.0], [0.1]), st, TC)
    assert e.iteration_ms == pytest.approx(4 + 8 + ring + 0.1)
    assert e.sync_busy_ms == pytest.approx(S / INTRA_BPMS)


def test_flows_on_one_link_queue_where_the_simulator_shares():
    # two groups on m0/0 send to m1/0 concurrently: the estimate queues the second transfer behind the first,
    # the simulator splits the link; the later delivery is the same, so both give the same iteration.
    cl = make_cluster([1, 1])
    gg = make_gg([dict(), dict(), dict()], [(0, 2, 1e5, 0.0), (1, 2, 1e5, 0.0)])
    cost = FixedCost([1e-6, 1e-6, 1.0])
    st = Strategy((Decision((4, 0)), Decision((4, 0)), Decision((0, 4))))
    e = estimate(gg, cl, cost, st, TC)
    s = simulate(gg, cl, cost, st, TC)
    assert e.iteration_ms == pytest.approx(s.iteration_ms, rel=1e-3)
    assert e.transfer_busy_ms == pytest.approx(4 * 4e5 / NIC_BPMS)


@pytest.mark.parametrize("seed", range(6))
def test_pure_placements_of_a_chain_match_the_simulator(seed):
    # one device per group along a chain: no two tasks or flows ever overlap, so the one-pass estimate is exact
    import numpy as np

    rng = np.random.default_rng(seed)
    cl = make_cluster([2, 2])
    K = 5
    gg = make_gg([dict(param_bytes=float(rng.integers(1, 10**6)), param_count=1) for _ in range(K)],
                 [(g, g + 1, float(rng.integers(1, 10**5)), 0.0) for g in range(K - 1)])
    cost = FixedCost(list(rng.uniform(0.1, 2.0, K)), list(rng.uniform(0.0, 0.5, K)))
    decs = []
    for _ in range(K):
        d = int(rng.integers(4))
        decs.append(Decision(tuple(8 if i == d else 0 for i in range(4))))
    st = Strategy(tuple(decs))
    e = estimate(gg, cl, cost, st, TC)
    assert math.isfinite(e.iteration_ms)
    assert e.iteration_ms == pytest.approx(simulate(gg, cl, cost, st, TC).iteration_ms)


def test_shared_parameter_sync_whole_group_model_and_task_graph_units():
    # g0 on m0/0 -> g1 on m0/1, both read parameter w (4e6 B, counted in g0). The simulator syncs w over both
    # devices after both backwards (a ring of 2: S / B + 2 alpha). `estimate` keeps the whole-group sync model
    # the GNN was trained with (g0 alone on one device: no sync); `critical_path` over the task graph's own sync
    # units charges the ring and lands on the simulator's figure.
    from tag.graph.opgraph import TensorInfo
    from tag.sim.build import build_task_graph
    from tag.sim.context import sim_context
    from tag.sim.critical_path import critical_path

    S = 4e6
    gg = make_gg([dict(param_bytes=S, param_count=1_000_000), dict()], [(0, 1, 1e3, 0.0)])
    gg.graph.tensors["w"] = TensorInfo("w", "float32", (1000, 1000), role="param")
    gg.shared_params = {"w": [0, 1]}
    cl, cost = make_cluster([2]), FixedCost([0.5, 0.5], [0.1, 0.0])
    st = Strategy((Decision((8, 0), "allreduce"), Decision((0, 8))))
    xfer = 8e3 / INTRA_BPMS + INTRA_LAT_MS
    no_sync = 4 + xfer + 4 + 8 + xfer + 8 + 0.1
    ring = S / INTRA_BPMS + 2 * INTRA_LAT_MS
    assert estimate(gg, cl, cost, st, TC).iteration_ms == pytest.approx(no_sync)
    tg = build_task_graph(sim_context(gg, cl, cost, TC), st)
    cp = critical_path(tg, [l.bytes_per_ms for l in cl.links])
    assert cp.iteration_ms == pytest.approx(no_sync + ring)
    assert cp.iteration_ms == pytest.approx(simulate(gg, cl, cost, st, TC).iteration_ms)

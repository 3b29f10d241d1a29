"""The evaluator answers a strategy whose simulation key was scored before from its cache: simulator calls counted by
hand, budgets unchanged, and two bucket caps that fuse the same groups simulate alike (checked by the simulator)."""

import pytest

from tag.cost import make_cost_model
from tag.graph import load_model
from tag.graph.coarsen import coarsen
from tag.search.baselines import build_baseline
from tag.search.evaluate import Evaluator, simulation_key
from tag.sim import simulate
from tag.sim.buckets import MIB, own_sync_bytes
from tag.sim.context import sim_context
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.topology import load_topology

from tests.search.test_search_mcts_synthetic import FakeResult


def test_alias_hits_skip_the_simulator_but_count_in_the_budget():
    calls = []

    def sim(s):
        calls.append(s)
        return FakeResult(10.0 + s.bucket_mb)

    # a toy canonical form: every cap below 10 MiB simulates alike, and so does every cap from 10 MiB up
    ev = Evaluator(sim, 10.0, {}, key_fn=lambda s: (s.decisions, s.bucket_mb < 10.0))
    d = (Decision((1, 1)),)
    ev.add(Strategy(d, 50.0), FakeResult(60.0))  # a seeded result registers its key too
    for mb in (1.0, 2.0, 10.0, 25.0, 50.0, 2.0):
        ev.result(Strategy(d, mb))
    # by hand: 1 is simulated; 2 takes 1's result; 10 and 25 take the seeded 50's; 50 and the second 2 are cached
    assert [s.bucket_mb for s in calls] == [1.0]
    assert ev.alias_hits == 3 and ev.simulations == 4  # 1, 2, 10, 25: every new strategy counts in the budget
    assert ev.result(Strategy(d, 2.0)).iteration_ms == 11.0 and ev.result(Strategy(d, 25.0)).iteration_ms == 60.0


@pytest.fixture(scope="module")
def small():
    cluster = load_topology("datasets/topologies/heterog8.json")
    graph = load_model("datasets/models/resnet_tiny.onnx", batch_size=64, n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    training = TrainingConfig(optimizer="momentum")
    return gg, cluster, make_cost_model(gg, training), training


def test_caps_that_fuse_the_same_groups_share_a_key_and_a_result(small):
    gg, cluster, cost, training = small
    base = build_baseline("dp-even", gg, cluster, cost, training)
    total_mib = sum(own_sync_bytes(gg, base.decisions)) / MIB
    with_params = sum(1 for b in own_sync_bytes(gg, base.decisions) if b > 1e-9)
    assert total_mib < 64 and with_params >= 2  # every cap >= 64 MiB fuses all gradients into one bucket
    ctx = sim_context(gg, cluster, cost, training)
    caps = {mb: Strategy(base.decisions, mb) for mb in (0.0, 64.0, 128.0, 512.0)}
    keys = {mb: simulation_key(gg, ctx, s) for mb, s in caps.items()}
    assert keys[64.0] == keys[128.0] == keys[512.0] != keys[0.0]
    assert len(keys[64.0][2]) == 1 and len(keys[0.0][2]) == with_params  # one bucket; one per group with params
    results = {mb: simulate(gg, cluster, cost, s, training) for mb, s in caps.items()}
    assert results[64.0].iteration_ms == results[128.0].iteration_ms == results[512.0].iteration_ms
    assert results[64.0].peak_memory_gb == results[512.0].peak_memory_gb

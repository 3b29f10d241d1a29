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
    graph = load_model("datasets/models/resnet_tiny.onnx", batch_size=2048, n_devices=cluster.n_devices)
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
    keys = {mb: simulation_key(ctx, s) for mb, s in caps.items()}
    assert keys[64.0] == keys[128.0] == keys[512.0] != keys[0.0]
    assert len(keys[64.0][2]) == 1 and len(keys[0.0][2]) == with_params  # one bucket; one per group with params
    results = {mb: simulate(gg, cluster, cost, s, training) for mb, s in caps.items()}
    assert results[64.0].iteration_ms == results[128.0].iteration_ms == results[512.0].iteration_ms
    assert results[64.0].peak_memory_gb == results[512.0].peak_memory_gb


def test_floors_rule_out_without_simulating_and_count_like_the_cache():
    calls = []

    def sim(s):
        calls.append(s.bucket_mb)
        return FakeResult(s.bucket_mb)  # the toy: a strategy's time is its bucket cap

    floors = {1.0: 0.0, 8.0: 4.0, 30.0: 25.0, 40.0: 5.0}
    ev = Evaluator(sim, 10.0, {}, floor_fn=lambda s: floors[s.bucket_mb])
    d = (Decision((1, 1)),)
    cur = ev.value(Strategy(d, 8.0))  # 8 ms: value ln(10 / 8)
    assert calls == [8.0] and ev.simulations == 1
    # no floor (0): simulated; floor 25 ms scores 10/25 - 1 = -0.6 <= ln(1.25): ruled out, counted, not simulated;
    # floor 5 ms scores ln 2 > ln(1.25): simulated
    assert ev.can_exceed(Strategy(d, 1.0), cur) and not ev.can_exceed(Strategy(d, 30.0), cur)
    assert ev.can_exceed(Strategy(d, 40.0), cur)
    assert ev.simulations == 2 and ev.floored == 1 and calls == [8.0]
    assert not ev.can_exceed(Strategy(d, 30.0), cur) and ev.simulations == 2  # asked again: counted once
    assert ev.can_exceed(Strategy(d, 30.0), -0.7)  # -0.6 > -0.7: it might beat that, so it must be scored
    assert ev.result(Strategy(d, 30.0)).iteration_ms == 30.0 and calls == [8.0, 30.0]
    assert ev.simulations == 2  # scored uncounted, as a cache hit would have been


def test_refine_with_floors_takes_the_same_path_with_fewer_simulations(small):
    from tag.search.evaluate import compute_floor_ms
    from tag.search.refine import refine
    from tag.search.space import build_space

    gg, cluster, cost, training = small
    base = build_baseline("dp-proportional", gg, cluster, cost, training)
    space = build_space(gg, cluster, cost, gg.graph.batch_size, base)
    runs = []
    for floor_fn in (None, lambda s: compute_floor_ms(gg, cluster, cost, s)):
        calls = []

        def sim(s):
            calls.append(s)
            return simulate(gg, cluster, cost, s, training)
        ref = sim(base).iteration_ms
        calls.clear()
        ev = Evaluator(sim, ref, {d.id: d.type.usable_memory_bytes / 1e9 for d in cluster.devices}, floor_fn=floor_fn)
        out = refine(space, ev, base, max_simulations=120)
        runs.append((out, ev.simulations, ev.best[1], len(calls), ev.floored))
    (a, sims_a, best_a, calls_a, _), (b, sims_b, best_b, calls_b, floored) = runs
    assert a == b and best_a == best_b and sims_a == sims_b == 1 + 120  # the start, then the budget
    assert floored > 0 and calls_b == calls_a - floored

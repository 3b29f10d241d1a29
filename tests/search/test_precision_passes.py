"""The precision choice runs the memory pass of a candidate only where its variant could change the candidate's
score: the same choice, scores and chosen seeds as running every pass (the fold written out here), fewer simulations;
the compute floor by hand and under the simulator's times."""

from dataclasses import replace

import pytest

from tag.cost import make_cost_model
from tag.graph import load_model
from tag.graph.coarsen import coarsen
from tag.search.memory_pass import fit_memory
from tag.search.precision import (_better, auto_precisions, can_score, choose_precision, compute_floor_ms,
                                  make_seeds)
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.topology import load_topology

from tests.search.test_search_baselines import FakeCost, make_cluster, make_gg


def test_compute_floor_by_hand():
    # fwd = work x rows / speed, bwd = 2 x fwd: device 0 (speed 1) runs g0 at 3 rows and g1 at 4 rows:
    # (1 x 3 + 2 x 4) x 3 = 33 ms; device 1 (speed 2) runs g0 at 1 row: 1 x 1 / 2 x 3 = 1.5 ms
    gg = make_gg(2)
    cl = make_cluster([100, 100], names=["slow", "fast"])
    cost = FakeCost([1, 2], {"slow": 1.0, "fast": 2.0}, bwd_factor=2.0)
    s = Strategy((Decision((3, 1)), Decision((4, 0))))
    assert compute_floor_ms(gg, cl, cost, s) == pytest.approx(33.0)


@pytest.fixture(scope="module")
def case():
    """resnet50 on modern8 (A100s and L4s: fp32, tf32, bf16 and fp16 are candidates) at batch 1,024, where
    single-device does not fit (its pass runs on the chosen precision only) and the data-parallel baselines do."""
    cluster = load_topology("datasets/topologies/modern8.json")
    graph = load_model("datasets/models/resnet50.onnx", batch_size=1024, n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    training = TrainingConfig(optimizer="adam")
    return gg, cluster, training, (lambda p: make_cost_model(gg, replace(training, precision=p)))


def every_pass_choice(gg, cluster, training, cost_for):
    """The choice as it was made before: every candidate's seeds with every pass, folded with `_better`."""
    usable_gb = {d.id: d.type.usable_memory_bytes / 1e9 for d in cluster.devices}
    chosen, tried, sims = None, {}, 0
    for p in auto_precisions(cluster):
        seeds = make_seeds(gg, cluster, cost_for(p), replace(training, precision=p))
        sims += len(seeds.cache)
        score = seeds.score(usable_gb)
        tried[p] = {"fits": score[0] == 0, "best_start_ms": round(score[1], 4) if score[0] == 0 else None}
        if chosen is None or _better(score, chosen[1]):
            chosen = (seeds, score)
    return chosen[0], tried, sims - len(chosen[0].cache)


def test_same_choice_and_seeds_as_every_pass_with_fewer_simulations(case):
    gg, cluster, training, cost_for = case
    assert len(auto_precisions(cluster)) >= 2
    want, tried, want_sims = every_pass_choice(gg, cluster, training, cost_for)
    got = choose_precision(gg, cluster, training, cost_for)
    assert got.report["candidates"] == tried
    assert got.seeds.training.precision == want.training.precision
    assert list(got.seeds.variants) == list(want.variants)
    assert all(got.seeds.variants[k][0] == want.variants[k][0] for k in want.variants)
    assert got.seeds.simulations == want.simulations and got.seeds.cache.keys() == want.cache.keys()
    assert got.simulations < want_sims  # passes skipped on the candidates not chosen


def test_floor_under_simulated_times_of_baselines_and_their_variants(case):
    gg, cluster, training, cost_for = case
    cost = cost_for("fp32")
    seeds = make_seeds(gg, cluster, cost, training)
    checked = 0
    for name, (s, r) in seeds.baselines.items():
        floor = compute_floor_ms(gg, cluster, cost, s)
        fit = fit_memory(gg, cluster, cost, training, s, lambda x: simulate(gg, cluster, cost, x, training),
                         max_simulations=6)
        for res in (r, fit.result):
            assert res.fit_iteration_ms >= floor * (1 - 1e-12)
            checked += 1
    assert checked == 2 * len(seeds.baselines)
    skipped = {n for n, (_, r) in seeds.baselines.items() if r.oom} - set(can_score(gg, cluster, cost, seeds.baselines))
    assert skipped == {"single-device"}  # its whole batch on one device computes longer than dp-proportional

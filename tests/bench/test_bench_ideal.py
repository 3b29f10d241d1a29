"""The ideal bound: the LP against hand values and a brute force, and below every baseline the simulator scores."""

import itertools
import os

import pytest

from tag.bench.ideal import ideal_bound, min_makespan_ms

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_lp_by_hand():
    # two groups, two device types; each type is 4x faster at one group: each group goes to its fast type
    assert min_makespan_ms([[1.0, 4.0], [4.0, 1.0]], [1, 1]) == pytest.approx(1.0)
    # one type: the total work shared by its devices
    assert min_makespan_ms([[3.0], [5.0]], [4]) == pytest.approx(2.0)
    # one group, types at 6 ms and 3 ms (one device each): rates 1/6 + 1/3 per ms -> T = 1 / (1/2 ms) = 2 ms
    assert min_makespan_ms([[6.0, 3.0]], [1, 1]) == pytest.approx(2.0)


@pytest.mark.parametrize("c, n", [([[5.0, 2.0], [3.0, 7.0]], [2, 1]), ([[1.0, 1.5], [8.0, 2.0]], [1, 3]),
                                  ([[4.0, 4.0], [4.0, 4.0]], [1, 1])])
def test_lp_matches_brute_force_over_fractions(c, n):
    steps = 400
    best = min(max((x0 * c[0][0] + x1 * c[1][0]) / n[0], ((1 - x0) * c[0][1] + (1 - x1) * c[1][1]) / n[1])
               for x0, x1 in itertools.product([i / steps for i in range(steps + 1)], repeat=2))
    lp = min_makespan_ms(c, n)
    assert lp <= best + 1e-9
    assert best - lp <= max(max(r) for r in c) / steps  # the grid is within one step of the optimum


@pytest.mark.parametrize("model, topo", [("small_cnn", "heterog8"), ("mlp", "cpu4")])
def test_ideal_is_below_every_baseline(model, topo):
    from tag.cost import RooflineCostModel
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.search.baselines import run_baselines
    from tag.strategy import TrainingConfig
    from tag.topology import load_topology

    cluster = load_topology(os.path.join(ROOT, "datasets", "topologies", f"{topo}.json"))
    graph = load_model(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"), n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    training = TrainingConfig()
    cost = RooflineCostModel(gg, training)
    bound = ideal_bound(gg, cluster, cost, graph.batch_size)
    for name, (_, res) in run_baselines(gg, cluster, cost, training).items():
        assert bound.iteration_ms <= res.fit_iteration_ms + 1e-9, name
    if len(bound.type_names) == 1:  # homogeneous: the whole batch's compute over the device count
        dev = cluster.devices[0].type
        total = sum(cost.group_fwd_ms(g.id, dev, graph.batch_size) + cost.group_bwd_ms(g.id, dev, graph.batch_size)
                    for g in gg.groups)
        assert bound.iteration_ms == pytest.approx(total / cluster.n_devices)

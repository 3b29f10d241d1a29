"""Lookahead targets and the new state features, checked against values worked out separately."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tag.gnn.data import GLOBAL_DIM, InstanceFeatures
from tag.gnn.lookahead import lookahead_samples, policy_target
from tag.gnn.selfplay import Instance, start_search
from tag.graph.coarsen import coarsen
from tag.search.baselines import build_baseline
from tag.search.space import build_space
from tag.sim import simulate
from tag.topology import parse_topology

from gnn_helpers import FlopsCost, topology


@pytest.fixture(scope="module")
def inst(small_cnn_graph, training):
    gg = coarsen(small_cnn_graph, k=4, n_devices=4)
    cluster = parse_topology(topology(), "t.json")
    cost = FlopsCost(gg)
    batch = gg.graph.batch_size
    base = build_baseline("dp-even", gg, cluster, cost, training, batch)
    order = build_space(gg, cluster, cost, batch, base).order
    feats = InstanceFeatures(gg, cluster, cost, batch, training.optimizer, order=order)
    return Instance("t", gg, cluster, cost, training, batch, feats)


def _ms(inst, g, d, rows):
    t = inst.cluster.devices[d].type
    return inst.cost.group_fwd_ms(g, t, rows) + inst.cost.group_bwd_ms(g, t, rows) if rows else 0.0


def test_global_and_load_after_features_by_hand(inst):
    f = inst.features
    base = build_baseline("dp-even", inst.gg, inst.cluster, inst.cost, inst.training, inst.batch)
    space = build_space(inst.gg, inst.cluster, inst.cost, inst.batch, base)
    g = space.order[0]
    data = f.state(base, g, space.candidates[g])
    assert tuple(data.u.shape) == (1, GLOBAL_DIM)
    n, K = inst.cluster.n_devices, inst.gg.n_groups
    load = [sum(_ms(inst, h, d, base.decisions[h].rows[d]) for h in range(K)) for d in range(n)]
    assert float(data.u[0, 0]) == pytest.approx(math.log1p(max(load) / f.time_scale_ms), rel=1e-5)
    assert float(data.u[0, 6]) == 0.0  # dp-even of a small CNN fits
    for c, dec in enumerate(space.candidates[g]):
        after = [load[d] - _ms(inst, g, d, base.decisions[g].rows[d]) + _ms(inst, g, d, dec.rows[d]) for d in range(n)]
        assert float(data["cand"].x[c, 15]) == pytest.approx(math.log1p(max(after) / f.time_scale_ms), rel=1e-5)
        assert float(data["cand"].x[c, 16]) == pytest.approx((max(after) - max(load)) / f.time_scale_ms, rel=1e-4, abs=1e-6)


def test_lookahead_policy_target_is_softmax_of_directly_simulated_children(inst):
    run = start_search(inst, None, seed=0)
    samples = lookahead_samples(inst, run, np.random.default_rng(0), trajectories=1, temperature=0.05, max_depth=2)
    assert len(samples.policy) == 2 and len(samples.value) >= 3
    root = run.tree.base
    g = run.tree.space.order[0]
    ref = run.evaluator.reference_ms
    values = []
    for c in run.tree.space.candidates[g]:
        res = simulate(inst.gg, inst.cluster, inst.cost, root.replace(g, c), inst.training)
        assert not res.oom
        r = ref / res.iteration_ms  # the search's value of a plan that fits, by its definition
        values.append(math.log(r) if r >= 1 else r - 1)
    target = samples.policy[0]["cand"].target.numpy()
    assert target == pytest.approx(policy_target(values, 0.05), abs=1e-6)
    root_ms = simulate(inst.gg, inst.cluster, inst.cost, root, inst.training).iteration_ms
    assert float(samples.policy[0].value) == pytest.approx(math.log(inst.features.time_scale_ms / root_ms), rel=1e-5)


def test_value_prior_is_the_softmax_of_each_child_scored_alone(inst):
    import torch

    from tag.gnn.model import TagGNN
    from tag.gnn.priors import make_priors_fn, value_prior

    torch.manual_seed(1)
    net = TagGNN(hidden=16, layers=1, heads=2).eval()
    base = build_baseline("dp-even", inst.gg, inst.cluster, inst.cost, inst.training, inst.batch)
    space = build_space(inst.gg, inst.cluster, inst.cost, inst.batch, base)
    g = space.order[0]
    cands = space.candidates[g]
    with torch.no_grad():
        alone = [float(net(inst.features.state(base.replace(g, c)), with_policy=False)[1][0]) for c in cands]
    p, vmax = value_prior(net, inst.features, base, g, cands, temperature=0.1)
    assert p == pytest.approx(policy_target(alone, 0.1), abs=1e-5) and vmax == pytest.approx(max(alone), abs=1e-5)
    fn = make_priors_fn(net, inst.features, uniform_mix=0.25, mode="value", temperature=0.1)
    q, v0 = fn(base, g, cands)
    assert q == pytest.approx(0.75 * policy_target(alone, 0.1) + 0.25 / len(cands), abs=1e-5)
    assert q.sum() == pytest.approx(1.0) and v0 == 0.0  # the first state scored is the reference
    with pytest.raises(ValueError):
        make_priors_fn(net, inst.features, mode="nope")

"""`InstanceFeatures.estimate` keeps the critical-path estimate per strategy: the same figures as calling
`tag.sim.critical_path.estimate` afresh, for every strategy asked, and the state features built from it unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np

from gnn_helpers import dp_instance
from tag.sim.critical_path import estimate


def test_memoised_estimate_equals_a_fresh_one(small_cnn_graph, training):
    gg, cluster, cost, batch, base, space, feats = dp_instance(small_cnn_graph, training, k=5)
    one_device = dataclasses.replace(base, decisions=tuple(
        dataclasses.replace(d, rows=tuple(batch if i == 0 else 0 for i in range(cluster.n_devices)), sync=None)
        for d in base.decisions))
    for strategy in (base, one_device, base):
        est = feats.estimate(strategy)
        assert est == estimate(gg, cluster, cost, strategy, feats.training)
    assert feats.estimate(base) is feats.estimate(base)  # asked again: the kept one
    assert len(feats._estimates) == 2
    # the state's value features read it: equal to a fresh instance's, which computes it anew
    from tag.gnn.data import InstanceFeatures

    fresh = InstanceFeatures(gg, cluster, cost, batch, order=space.order)
    a, b = feats.state(base), fresh.state(base)
    assert np.array_equal(a.u, b.u) and np.array_equal(a.v_prior, b.v_prior)

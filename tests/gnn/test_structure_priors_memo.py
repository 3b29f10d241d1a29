"""The structure priors encode each strategy once (issue 24 must-show 4, part 13): scoring a level's actions from
the memoised state embedding gives bit for bit the priors and value of a forward of the whole decision point (the
network's `forward` on `PointBuilder.point`, written out below as the second method), in any order of calls."""

from __future__ import annotations

import numpy as np
import torch

from tests.gnn.test_structure_gnn import instance  # noqa: F401  (that module's fixture)


def _whole_point(net, points, strategy, level, names, uniform_mix=0.2):
    """Priors and value from one forward of the whole point (state graph + action nodes), as before the memo."""
    from tag.gnn.structure_model import action_log_probs

    data = points.point(strategy, level, names)
    with torch.no_grad():
        logits, value = net(data)
        p = action_log_probs(data, logits).exp().double().numpy()
    return (1 - uniform_mix) * p / p.sum() + uniform_mix / len(names), float(value[0])


def test_memoised_state_gives_the_whole_point_forward_bit_for_bit(instance):  # noqa: F811
    from tag.gnn.structure_model import StructureNet
    from tag.gnn.structure_priors import PointBuilder, make_structure_priors_fn
    from tag.search.baselines import run_baselines

    _, gg, cluster, cost, training = instance
    torch.manual_seed(3)
    net = StructureNet(hidden=16, layers=2, heads=2).eval()
    base = run_baselines(gg, cluster, cost, training)
    strategies = [base[k][0] for k in sorted(base)][:3]
    assert len(set(strategies)) >= 2
    points = PointBuilder(gg, cluster, cost, training)
    fn = make_structure_priors_fn(net, points)
    calls = [("memory", ["keep", "zero-1", "zero-2", "zero-3", "recompute"]),
             ("bucket", ["keep", "bucket-0", "bucket-5", "bucket-64"]),
             ("kind", ["data", "placement", "pipeline"]),
             ("memory", ["keep", "zero-1", "zero-2", "zero-3", "recompute"])]
    seen = []
    for level, names in calls:  # each strategy at several levels, strategies interleaved, a level asked twice
        for s in strategies:
            p, v = fn(s, level, names)
            q, w = _whole_point(net, points, s, level, names)
            assert np.array_equal(p, q) and v == w
            seen.append(p)
    assert not np.array_equal(seen[0], seen[len(strategies)])  # the actions still matter
    assert fn(strategies[0], "kind", ["data"])[0].tolist() == [1.0]  # one action: no network

"""`search_order` gives the group order of `build_space` without building any candidate, and it is a sort of the
groups by the cost key worked out here by hand from the cost model."""

import numpy as np
import pytest

from tag.cost import make_cost_model
from tag.graph import load_model
from tag.graph.coarsen import coarsen
from tag.search.baselines import build_baseline
from tag.search.space import build_space, search_order
from tag.strategy import TrainingConfig
from tag.topology import load_topology


@pytest.mark.parametrize("model,topo,batch", [("resnet_tiny", "heterog8", 256), ("gpt2_tiny", "modern8", 64),
                                              ("mlp", "cpu4", 96)])
def test_order_is_build_spaces_and_the_hand_sort(model, topo, batch):
    cluster = load_topology(f"datasets/topologies/{topo}.json")
    graph = load_model(f"datasets/models/{model}.onnx", batch_size=batch, n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    training = TrainingConfig(optimizer="adam")
    cost = make_cost_model(gg, training)
    order = search_order(gg, cluster, cost, batch)
    for name in ("dp-even", "single-device"):  # the order does not depend on the base
        assert build_space(gg, cluster, cost, batch, build_baseline(name, gg, cluster, cost, training, batch)).order \
            == order
    # by hand, at the even share's rows (a knot or not, the time per row there): fastest device x batch + 2 x param
    # bytes over the median off-diagonal bandwidth
    n = cluster.n_devices
    probe = max(1, batch // n)
    bw = np.median([cluster.bandwidth_gbps[a][b] for a in range(n) for b in range(n) if a != b]) * 1e9 / 8 / 1e3
    keys = []
    for g in gg.groups:
        per_row = [(cost.group_fwd_ms(g.id, d.type, probe) + cost.group_bwd_ms(g.id, d.type, probe)) / probe
                   for d in cluster.devices]
        keys.append(min(per_row) * batch + 2.0 * g.param_bytes / bw)
    by_hand = sorted(range(len(keys)), key=lambda i: (-keys[i], i))
    # the knot interpolation may move near-ties; every inversion must be between keys within 1%
    pos = {g: i for i, g in enumerate(order)}
    for a in range(len(keys)):
        for b in range(len(keys)):
            if keys[a] > keys[b] * 1.01:
                assert pos[a] < pos[b]
    assert len(order) == len(gg.groups) and sorted(order) == list(range(len(gg.groups)))
    assert by_hand[0] == order[0]

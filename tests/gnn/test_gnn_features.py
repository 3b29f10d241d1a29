"""Features of a search state: one time scale, scale invariance, non-zero tensor sizes, assignment flags."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tag.cost import comm
from tag.gnn.data import EDGE_DIMS, USES, InstanceFeatures
from tag.gnn.graph import to_torch
from tag.graph.coarsen import coarsen
from tag.search.baselines import build_baseline
from tag.search.space import build_space
from tag.topology import parse_topology

from gnn_helpers import FlopsCost, topology


def _state(gg, speed=1.0, bw=1.0, latency=1.0, training=None, which=1):
    cluster = parse_topology(topology(speed, bw, latency), "t.json")
    cost = FlopsCost(gg)
    batch = gg.graph.batch_size
    base = build_baseline("dp-even", gg, cluster, cost, training, batch)
    space = build_space(gg, cluster, cost, batch, base)
    feats = InstanceFeatures(gg, cluster, cost, batch, order=space.order)
    g = space.order[0]
    # a mixed state: group g placed on device 3 alone, the rest data parallel
    strat = base.replace(space.order[which], space.candidates[space.order[which]][-1])
    return feats, to_torch(feats.state(strat, g, space.candidates[g])), space, strat


def _arrays(data):
    out = {"group": data["group"].x, "device": data["device"].x, "cand": data["cand"].x, "u": data.u}
    for et in list(EDGE_DIMS) + [USES]:
        out[et] = data[et].edge_attr
    return out


@pytest.fixture(scope="module")
def gg(small_cnn_graph):
    return coarsen(small_cnn_graph, k=6, n_devices=4)


def test_doubling_every_speed_and_bandwidth_leaves_features_unchanged(gg, training):
    f1, d1, _, _ = _state(gg, training=training)
    f2, d2, _, _ = _state(gg, speed=2.0, bw=2.0, latency=2.0, training=training)
    assert f2.time_scale_ms == pytest.approx(f1.time_scale_ms / 2, rel=1e-9)
    a1, a2 = _arrays(d1), _arrays(d2)
    for key in a1:
        assert torch.allclose(a1[key], a2[key], atol=1e-5), key
    assert float(a1[("group", "flow", "group")].abs().sum()) > 0


def test_doubling_bandwidth_alone_changes_communication_features_only(gg, training):
    _, d1, _, _ = _state(gg, training=training)
    _, d2, _, _ = _state(gg, bw=2.0, training=training)
    a1, a2 = _arrays(d1), _arrays(d2)
    flow = ("group", "flow", "group")
    # tensor bytes over bandwidth: exactly halved time -> smaller log1p feature
    assert torch.all(a2[flow][:, 0] < a1[flow][:, 0])
    link = ("device", "link", "device")
    assert torch.all(a2[link][:, 0] < a1[link][:, 0])
    # compute on place edges does not depend on bandwidth
    place = ("group", "place", "device")
    assert torch.allclose(a1[place][:, 0], a2[place][:, 0])


def test_time_scale_is_the_proportional_share_of_compute(gg, training):
    feats, _, _, _ = _state(gg, training=training)
    cost = FlopsCost(gg)
    B = gg.graph.batch_size
    per_device = []
    for dev in feats.cluster.devices:
        per_device.append(sum(cost.group_fwd_ms(g, dev.type, B) + cost.group_bwd_ms(g, dev.type, B) for g in range(gg.n_groups)))
    # devices: fast, fast, slow, slow; FLOP-proportional costs -> T = total FLOPs / sum of peaks
    total_flops = sum(g.fwd_flops_per_row * B + g.fwd_flops_fixed + g.bwd_flops_per_row * B + g.bwd_flops_fixed for g in gg.groups)
    assert feats.time_scale_ms == pytest.approx(total_flops / ((10 + 10 + 4 + 4) * 1e9), rel=1e-9)
    assert feats.time_scale_ms == pytest.approx(1 / sum(1 / t for t in per_device), rel=1e-9)


def test_tensor_size_feature_is_nonzero_and_worked_out_by_hand(gg, training):
    feats, data, _, _ = _state(gg, training=training)
    B = gg.graph.batch_size
    # median pairwise bandwidth: pairs inside machine a at 200 Gb/s (6 ordered), to/from b at 10 Gb/s (6)
    assert feats.median_gbps == pytest.approx((200 + 10) / 2)
    attr = data["group", "flow", "group"].edge_attr
    assert len(gg.edges) == attr.shape[0] > 0
    for e, row in zip(gg.edges, attr):
        expect = math.log1p(e.bytes_per_row * B / (105e9 / 8 / 1e3) / feats.time_scale_ms)
        assert float(row[0]) == pytest.approx(expect, rel=1e-5)
        assert float(row[0]) > 0  # TAG's tensor-size feature was always zero; ours is not
        assert float(row[4]) == 1.0
    rev = data["group", "rev_flow", "group"]
    assert torch.equal(rev.edge_index, data["group", "flow", "group"].edge_index.flip(0))
    assert torch.all(rev.edge_attr[:, 4] == 0)


def test_place_edges_flag_the_assignment_and_rows(gg, training):
    feats, data, space, strat = _state(gg, training=training)
    place = data["group", "place", "device"]
    K, n, B = gg.n_groups, 4, gg.graph.batch_size
    assert place.edge_index.shape[1] == K * n
    for (g, d), attr in zip(place.edge_index.t().tolist(), place.edge_attr):
        r = strat.decisions[g].rows[d]
        assert float(attr[2]) == (1.0 if r > 0 else 0.0)
        assert float(attr[3]) == pytest.approx(r / B)
        dt = feats.cluster.devices[d].type
        t = FlopsCost(gg).group_fwd_ms(g, dt, r) + FlopsCost(gg).group_bwd_ms(g, dt, r) if r > 0 else 0.0
        assert float(attr[4]) == pytest.approx(math.log1p(t / feats.time_scale_ms), rel=1e-5, abs=1e-7)
    # the current group is flagged exactly once, decided groups are those before it in the order (none)
    assert int(data["group"].x[:, 8].sum()) == 1
    assert int(data["group"].x[space.order[0], 8]) == 1
    assert float(data["group"].x[:, 9].sum()) == 0


def test_candidate_nodes_weight_devices_by_row_share(gg, training):
    feats, data, space, _ = _state(gg, training=training)
    g = space.order[0]
    cands = space.candidates[g]
    assert data["cand"].x.shape[0] == len(cands)
    src, dst = data[USES].edge_index
    w = data[USES].edge_attr[:, 0]
    for c, dec in enumerate(cands):
        mask = dst == c
        got = {int(s): float(x) for s, x in zip(src[mask], w[mask])}
        assert got == pytest.approx({d: r / gg.graph.batch_size for d, r in enumerate(dec.rows) if r > 0})
    assert float(data["cand"].x[0, 0]) == 1.0 and float(data["cand"].x[1:, 0].sum()) == 0


def test_links_cover_every_ordered_pair_with_latency_on_the_time_scale(gg, training):
    feats, data, _, _ = _state(gg, training=training)
    link = data["device", "link", "device"]
    assert link.edge_index.shape[1] == 4 * 3
    for (i, j), attr in zip(link.edge_index.t().tolist(), link.edge_attr):
        lat_ms = feats.cluster.latency_us[i, j] / 1e3
        assert float(attr[2]) == pytest.approx(math.log1p(lat_ms / feats.time_scale_ms), rel=1e-5)
        same = feats.cluster.devices[i].machine == feats.cluster.devices[j].machine
        assert float(attr[3]) == float(same)
        bw = feats.cluster.bandwidth_gbps[i, j]
        assert float(attr[4]) == pytest.approx(math.log(bw / 105.0), rel=1e-5)

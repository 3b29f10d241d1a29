"""State features of a strategy with a tensor-sharded group: its row map over the batch (`Decision.batch_rows`) is
what moves between groups, so the features read it (a shard's per-position rows sum to the batch times the grid's
positions and have no slices)."""

from __future__ import annotations

import pytest

from tag.search.shard_search import group_shards
from tag.strategy import Decision, Shard

from gnn_helpers import dp_instance

FLOW = ("group", "flow", "group")
MOVED = 3  # flow edge attributes: [static bytes ms, static fixed ms, transfer ms, share of the batch moved, forward]


@pytest.fixture(scope="module")
def setup(small_cnn_graph, training):
    gg, _, _, batch, base, space, feats = dp_instance(small_cnn_graph, training, k=6)
    return gg, base, space, feats, batch


def test_a_column_shard_moves_half_the_batch_to_the_next_data_parallel_group(setup):
    gg, base, space, feats, B = setup
    assert B % 4 == 0
    g = next(x for x in sorted(group_shards(gg)) if any(e.src == x for e in gg.edges))
    # replicas (0, 1) and (2, 3), each with half the batch on both of its positions
    sharded = Decision((B // 2,) * 4, base.decisions[g].sync, shard=Shard("column", ((0, 1), (2, 3)), (0.5, 0.5)))
    assert sharded.batch_rows == (B // 2, 0, B // 2, 0)
    strat = base.replace(g, sharded)
    data = feats.state(strat)  # raised in slices before: the per-position rows sum to 2 B
    edges = [i for i, e in enumerate(gg.edges) if e.src == g and strat.decisions[e.dst].shard is None]
    assert edges
    for i in edges:
        # by hand: device 0 holds rows [0, B/2), the next group wants [0, B/4) there and [B/4, B/2) on device 1;
        # device 2 holds [B/2, B): [3B/4, B) moves to device 3. B/4 + B/4 of B rows move.
        assert strat.decisions[gg.edges[i].dst].batch_rows == (B // 4,) * 4
        assert float(data[FLOW].edge_attr[i, MOVED]) == pytest.approx(0.5)
    # and with a group being decided, its candidates read the same way
    other = next(x for x in space.order if x != g)
    feats.state(strat, other, space.candidates[other])

"""The graph container and batching (tag.gnn.graph): offsets and batch vectors worked out by hand."""

from __future__ import annotations

import pytest
import torch

from tag.gnn.graph import EdgeStore, HeteroGraph, NodeStore, batch_graphs

LINK = ("device", "link", "device")
USES = ("device", "uses", "cand")


def _graph(n_dev: int, n_cand: int, links: list, uses: list, u: float) -> HeteroGraph:
    g = HeteroGraph()
    g["device"].x = torch.arange(n_dev, dtype=torch.float32).view(-1, 1) + 10 * u
    g["cand"].x = torch.zeros(n_cand, 2)
    g["cand"].target = torch.full((n_cand,), 1.0 / n_cand)
    g[LINK].edge_index = torch.tensor(links, dtype=torch.long).view(-1, 2).t()
    g[LINK].edge_attr = torch.ones(len(links), 3) * u
    g[USES].edge_index = torch.tensor(uses, dtype=torch.long).view(-1, 2).t()
    g[USES].edge_attr = torch.ones(len(uses), 1)
    g.u = torch.full((1, 4), u)
    g.v_prior = torch.tensor([u])
    return g


def test_indexing_makes_typed_stores():
    g = HeteroGraph()
    assert isinstance(g["group"], NodeStore) and isinstance(g["group", "flow", "group"], EdgeStore)
    g["group"].x = torch.zeros(3, 2)
    assert g["group"].num_nodes == 3 and g["cand"].num_nodes == 0
    with pytest.raises(AttributeError):
        g["group"].features = torch.zeros(1)  # a misspelt field is an error, not a silent new attribute
    with pytest.raises(KeyError):
        g["group", "flow"]


def test_batch_offsets_and_vectors_by_hand():
    # graph 0: 2 devices, 1 candidate; links 1->0, 0->1; uses 0->0, 1->0
    # graph 1: 3 devices, 2 candidates; links 1->0, 2->1; uses 2->1
    a = _graph(2, 1, [(1, 0), (0, 1)], [(0, 0), (1, 0)], 1.0)
    b = _graph(3, 2, [(1, 0), (2, 1)], [(2, 1)], 2.0)
    out = batch_graphs([a, b])
    assert out["device"].batch.tolist() == [0, 0, 1, 1, 1]
    assert out["cand"].batch.tolist() == [0, 1, 1]
    # link edges of graph 1 shift by graph 0's 2 devices at both ends
    assert out[LINK].edge_index.tolist() == [[1, 0, 3, 4], [0, 1, 2, 3]]
    # uses edges: source (device) shifts by 2, destination (cand) by graph 0's 1 candidate
    assert out[USES].edge_index.tolist() == [[0, 1, 4], [0, 0, 2]]
    assert out["device"].x.view(-1).tolist() == [10.0, 11.0, 20.0, 21.0, 22.0]
    assert out["cand"].target.tolist() == [1.0, 0.5, 0.5]
    assert out[LINK].edge_attr[:, 0].tolist() == [1.0, 1.0, 2.0, 2.0]
    assert out.u.shape == (2, 4) and out.v_prior.tolist() == [1.0, 2.0]
    assert out.value is None and out.inst is None
    # the inputs are untouched
    assert a[LINK].edge_index.tolist() == [[1, 0], [0, 1]] and a["device"].batch is None


def test_batch_refuses_mixed_graphs():
    a = _graph(2, 1, [(1, 0)], [(0, 0)], 1.0)
    b = _graph(2, 1, [(1, 0)], [(0, 0)], 1.0)
    b.value = torch.tensor([0.5])
    with pytest.raises(ValueError, match="value"):
        batch_graphs([a, b])
    c = _graph(2, 1, [(1, 0)], [(0, 0)], 1.0)
    del c.edges[USES]
    with pytest.raises(ValueError, match="different types"):
        batch_graphs([a, c])
    with pytest.raises(ValueError, match="batches already"):
        batch_graphs([batch_graphs([a])])
    with pytest.raises(ValueError, match="empty"):
        batch_graphs([])


def test_graphs_pickle_and_copy():
    """`python -m tag.gnn.value_fit --data` pickles collected states."""
    import copy
    import pickle

    a = _graph(3, 2, [(1, 0), (2, 1)], [(2, 1)], 2.0)
    a.value = torch.tensor([0.5])
    for b in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a)):
        assert list(b.nodes) == list(a.nodes) and list(b.edges) == list(a.edges)
        assert torch.equal(b[LINK].edge_index, a[LINK].edge_index) and torch.equal(b["cand"].target, a["cand"].target)
        assert torch.equal(b.value, a.value) and b.inst is None

"""The pure-torch convolutions and segment ops (tag.gnn.layers, tag.gnn.segment) against a hand-worked example, a
per-node loop written from the papers' formulas, and, where torch_geometric is installed, PyG's own classes (same
outputs and gradients to 1e-5, same seeded initial weights)."""

from __future__ import annotations

import math

import pytest
import torch

from tag.gnn.layers import GATv2Conv, HeteroConv, TransformerConv
from tag.gnn.segment import scatter, softmax


def test_scatter_and_softmax_by_hand():
    src = torch.tensor([[1.0, -2.0], [3.0, -4.0], [5.0, 6.0]])
    index = torch.tensor([0, 0, 2])
    assert scatter(src, index, dim_size=4).tolist() == [[4.0, -6.0], [0.0, 0.0], [5.0, 6.0], [0.0, 0.0]]
    assert scatter(src, index, dim_size=4, reduce="mean").tolist() == [[2.0, -3.0], [0, 0], [5.0, 6.0], [0, 0]]
    assert scatter(src, index, dim_size=4, reduce="max").tolist() == [[3.0, -2.0], [0, 0], [5.0, 6.0], [0, 0]]
    assert scatter(src, index).shape == (3, 2)  # dim_size defaults to max(index) + 1
    # along axis 1: columns 0 and 1 of each row into segment 1
    assert scatter(src, torch.tensor([1, 1]), dim=1).tolist() == [[0.0, -1.0], [0.0, -1.0], [0.0, 11.0]]
    # softmax within segments: [ln 1, ln 3] -> [1/4, 3/4]; a segment of one -> 1
    p = softmax(torch.tensor([0.0, math.log(3.0), 7.0]), torch.tensor([1, 1, 0]))
    assert p.tolist() == pytest.approx([0.25, 0.75, 1.0], abs=1e-7)
    with pytest.raises(ValueError, match="reduce"):
        scatter(src, index, reduce="min")


def _identity_conv(root_weight: bool) -> TransformerConv:
    """1 head, 2 channels: W_q = W_k = W_v = W_s = I, no biases, W_e maps the scalar edge feature a to (a, 0)."""
    conv = TransformerConv(2, 2, heads=1, edge_dim=1, root_weight=root_weight)
    with torch.no_grad():
        for lin in (conv.lin_query, conv.lin_key, conv.lin_value, conv.lin_skip):
            lin.weight.copy_(torch.eye(2))
            lin.bias.zero_()
        conv.lin_edge.weight.copy_(torch.tensor([[1.0], [0.0]]))
    return conv


@pytest.mark.parametrize("root_weight", [False, True])
def test_transformer_conv_three_nodes_by_hand(root_weight):
    """x0 = (1, 0), x1 = (0, 1), x2 = (1, 1); edges 0 -> 2 (a = 0), 1 -> 2 (a = 1), 2 -> 0 (a = 0).

    Node 2: q = (1, 1); keys k + e: (1, 0) and (0, 1) + (1, 0) = (1, 1); scores 1/sqrt 2 and 2/sqrt 2; weights
    w0 = 1 / (1 + e^(1/sqrt 2)), w1 = 1 - w0; messages v + e: (1, 0) and (1, 1); out = (1, w1).
    Node 0: one edge, weight 1, message x2 + 0 = (1, 1). Node 1: no incoming edge, 0. root_weight adds x_i.
    """
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    edge_index = torch.tensor([[0, 1, 2], [2, 2, 0]])
    edge_attr = torch.tensor([[0.0], [1.0], [0.0]])
    w1 = 1.0 - 1.0 / (1.0 + math.exp(1.0 / math.sqrt(2.0)))
    want = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, w1]])
    if root_weight:
        want = want + x
    got = _identity_conv(root_weight)(x, edge_index, edge_attr)
    assert torch.allclose(got, want, atol=1e-6)


def _random_bipartite(seed: int, n_src: int, n_dst: int, n_edges: int, f: int = 6, edge_dim: int = 3):
    g = torch.Generator().manual_seed(seed)
    x_src, x_dst = torch.randn(n_src, f, generator=g), torch.randn(n_dst, f, generator=g)
    # destinations drawn from all but the last one: at least one destination without incoming edges
    edge_index = torch.stack([torch.randint(0, n_src, (n_edges,), generator=g),
                              torch.randint(0, max(n_dst - 1, 1), (n_edges,), generator=g)])
    return x_src, x_dst, edge_index, torch.randn(n_edges, edge_dim, generator=g)


def _loop_attention(n_dst: int, edge_index, H: int, C: int, score, message):
    """Attention node by node: out[i, head h] = sum over edges m into i of softmax_m(score(i, m, h)) * message(m, h),
    [n_dst, H * C] (0 where i has no edge)."""
    out = torch.zeros(n_dst, H * C)
    for i in range(n_dst):
        es = [m for m in range(edge_index.shape[1]) if int(edge_index[1, m]) == i]
        for h in range(H if es else 0):
            w = torch.softmax(torch.stack([score(i, m, h) for m in es]), 0)
            out[i, h * C:(h + 1) * C] = sum(w[t] * message(m, h) for t, m in enumerate(es))
    return out


def _loop_transformer(conv: TransformerConv, x_src, x_dst, edge_index, edge_attr):
    """TransformerConv's formula: scores q_i.(k_j + e_ij)/sqrt C, messages v_j + e_ij (+ the skip map of x_i)."""
    H, C = conv.heads, conv.out_channels
    q, k, v = (lin(x).view(-1, H, C) for lin, x in ((conv.lin_query, x_dst), (conv.lin_key, x_src),
                                                     (conv.lin_value, x_src)))
    e = conv.lin_edge(edge_attr).view(-1, H, C)
    src = edge_index[0]
    out = _loop_attention(x_dst.shape[0], edge_index, H, C,
                          lambda i, m, h: q[i, h] @ (k[src[m], h] + e[m, h]) / math.sqrt(C),
                          lambda m, h: v[src[m], h] + e[m, h])
    return out + (conv.lin_skip(x_dst) if conv.root_weight else 0.0)


def _loop_gatv2(conv: GATv2Conv, x_src, x_dst, edge_index, edge_attr):
    """GATv2's formula: scores a.LeakyReLU(W_r x_i + W_l x_j + W_e e_ij), messages W_l x_j (+ the bias)."""
    H, C = conv.heads, conv.out_channels
    xl, xr = conv.lin_l(x_src).view(-1, H, C), conv.lin_r(x_dst).view(-1, H, C)
    e = conv.lin_edge(edge_attr).view(-1, H, C)
    src = edge_index[0]
    out = _loop_attention(x_dst.shape[0], edge_index, H, C,
                          lambda i, m, h: conv.att[0, h] @ torch.nn.functional.leaky_relu(
                              xr[i, h] + xl[src[m], h] + e[m, h], 0.2),
                          lambda m, h: xl[src[m], h])
    return out + conv.bias


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_convs_match_their_formulas_node_by_node(seed):
    torch.manual_seed(seed)
    x_src, x_dst, ei, ea = _random_bipartite(seed, 5, 4, 9)
    with torch.no_grad():
        for root in (False, True):
            conv = TransformerConv(6, 4, heads=2, edge_dim=3, root_weight=root)
            assert torch.allclose(conv((x_src, x_dst), ei, ea), _loop_transformer(conv, x_src, x_dst, ei, ea),
                                  atol=1e-5)
        conv = GATv2Conv(6, 4, heads=2, edge_dim=3, add_self_loops=False)
        torch.nn.init.normal_(conv.bias)
        assert torch.allclose(conv((x_src, x_dst), ei, ea), _loop_gatv2(conv, x_src, x_dst, ei, ea), atol=1e-5)


def test_hetero_conv_sums_the_edge_types_into_each_node_type():
    torch.manual_seed(0)
    types = [("a", "r", "a"), ("b", "s", "a"), ("a", "t", "b")]
    conv = HeteroConv({et: TransformerConv(6, 4, heads=2, edge_dim=3, root_weight=False) for et in types})
    x_a, x_b = torch.randn(4, 6), torch.randn(3, 6)
    ei_ba = torch.stack([torch.randint(0, 3, (5,)), torch.randint(0, 4, (5,))])
    ei_ab = torch.stack([torch.randint(0, 4, (6,)), torch.randint(0, 3, (6,))])
    ei_aa = torch.stack([torch.randint(0, 4, (7,)), torch.randint(0, 4, (7,))])
    eas = {types[0]: torch.randn(7, 3), types[1]: torch.randn(5, 3), types[2]: torch.randn(6, 3)}
    eis = {types[0]: ei_aa, types[1]: ei_ba, types[2]: ei_ab}
    with torch.no_grad():
        out = conv({"a": x_a, "b": x_b}, eis, edge_attr_dict=eas)
        c = {et: conv.convs[f"<{'___'.join(et)}>"] for et in types}
        want_a = c[types[0]](x_a, ei_aa, eas[types[0]]) + c[types[1]]((x_b, x_a), ei_ba, eas[types[1]])
        want_b = c[types[2]]((x_a, x_b), ei_ab, eas[types[2]])
    assert torch.allclose(out["a"], want_a) and torch.allclose(out["b"], want_b)


# ---- against PyG, where it is installed --------------------------------------------------------------------------

def _pyg():
    return pytest.importorskip("torch_geometric.nn")


def _pairs(seed: int):
    """(ours, PyG's) conv pairs built from the same seed: TransformerConv with and without root weight, GATv2."""
    pnn = _pyg()
    out = []
    for make_ours, make_pyg in [
        (lambda: TransformerConv(6, 4, heads=2, edge_dim=3, root_weight=False),
         lambda: pnn.TransformerConv(6, 4, heads=2, edge_dim=3, root_weight=False)),
        (lambda: TransformerConv(6, 4, heads=2, edge_dim=3), lambda: pnn.TransformerConv(6, 4, heads=2, edge_dim=3)),
        (lambda: GATv2Conv(6, 4, heads=2, edge_dim=3, add_self_loops=False),
         lambda: pnn.GATv2Conv(6, 4, heads=2, edge_dim=3, add_self_loops=False)),
    ]:
        torch.manual_seed(seed)
        ours = make_ours()
        torch.manual_seed(seed)
        out.append((ours, make_pyg()))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_seeded_initial_weights_equal_pygs(seed):
    for ours, theirs in _pairs(seed):
        a, b = ours.state_dict(), theirs.state_dict()
        assert sorted(a) == sorted(b)
        assert all(torch.equal(a[k], b[k]) for k in a), type(ours).__name__


@pytest.mark.parametrize("seed, n_src, n_dst, n_edges", [(0, 5, 4, 9), (1, 30, 20, 120), (2, 3, 6, 0), (3, 8, 8, 40)])
def test_convs_match_pyg_outputs_and_gradients(seed, n_src, n_dst, n_edges):
    x_src, x_dst, ei, ea = _random_bipartite(100 + seed, n_src, n_dst, n_edges)
    for ours, theirs in _pairs(seed):
        with torch.no_grad():  # random (non-zero) GATv2 bias, so the comparison covers it
            for m in (ours, theirs):
                if isinstance(getattr(m, "bias", None), torch.nn.Parameter):
                    m.bias.copy_(torch.linspace(-1, 1, m.bias.numel()))
        ins = [t.clone().requires_grad_(True) for t in (x_src, x_dst, ea)]
        ins_p = [t.clone().requires_grad_(True) for t in (x_src, x_dst, ea)]
        a = ours((ins[0], ins[1]), ei, ins[2])
        b = theirs((ins_p[0], ins_p[1]), ei, ins_p[2])
        assert torch.allclose(a, b, atol=1e-5), type(ours).__name__
        w = torch.randn(a.shape, generator=torch.Generator().manual_seed(seed))
        (a * w).sum().backward()
        (b * w).sum().backward()
        for p, q in zip(ins, ins_p):
            assert torch.allclose(p.grad, q.grad, atol=1e-5)
        pb = dict(theirs.named_parameters())
        for k, p in ours.named_parameters():  # no gradient (lin_skip without root_weight) counts as zeros
            ga, gb = [t.grad if t.grad is not None else torch.zeros_like(t) for t in (p, pb[k])]
            assert torch.allclose(ga, gb, atol=1e-5), k


def test_segment_ops_match_pyg():
    utils = pytest.importorskip("torch_geometric.utils")
    g = torch.Generator().manual_seed(5)
    src = torch.randn(40, 3, 2, generator=g)
    index = torch.randint(0, 9, (40,), generator=g)  # 9 and up: empty segments
    for reduce in ("sum", "mean", "max"):
        assert torch.allclose(scatter(src, index, 0, dim_size=12, reduce=reduce),
                              utils.scatter(src, index, 0, dim_size=12, reduce=reduce), atol=1e-6)
    assert torch.allclose(softmax(src, index), utils.softmax(src, index), atol=1e-6)
    assert torch.allclose(softmax(src, index, 12), utils.softmax(src, index, num_nodes=12), atol=1e-6)

"""The network: policy over any number of candidates (softmax per state, order-equivariant), value per state,
gradients reach every layer; Kendall tau against hand-counted pairs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from gnn_helpers import dp_instance
from tag.gnn.graph import batch_graphs
from tag.gnn.layers import TransformerConv
from tag.gnn.metrics import kendall_tau
from tag.gnn.model import TagGNN, policy_log_probs


@pytest.fixture(scope="module")
def setup(small_cnn_graph, training):
    *_, base, space, feats = dp_instance(small_cnn_graph, training, k=5)
    return feats, space, base


def test_policy_is_a_distribution_per_state_for_any_candidate_count(setup):
    feats, space, base = setup
    torch.manual_seed(0)
    net = TagGNN(hidden=32, layers=3, heads=4).eval()
    datas = [feats.state(base, g, space.candidates[g]) for g in space.order[:3]]
    counts = [len(space.candidates[g]) for g in space.order[:3]]
    b = batch_graphs(datas)
    with torch.no_grad():
        logits, values = net(b)
        p = policy_log_probs(b, logits).exp()
    assert logits.shape == (sum(counts),)
    assert values.shape == (3,)
    start = 0
    for c, d in zip(counts, datas):
        assert float(p[start:start + c].sum()) == pytest.approx(1.0, abs=1e-5)
        # batching does not change a state's result
        with torch.no_grad():
            alone = policy_log_probs(d, net(d)[0]).exp()
        assert torch.allclose(alone, p[start:start + c], atol=1e-5)
        start += c


def test_candidate_order_does_not_matter(setup):
    feats, space, base = setup
    torch.manual_seed(1)
    net = TagGNN(hidden=32, layers=3, heads=4).eval()
    g = space.order[0]
    cands = space.candidates[g]
    perm = list(reversed(range(1, len(cands)))) + [0]  # candidate 0 moves last: its "is base" flag goes with it
    d1 = feats.state(base, g, cands)
    d2 = feats.state(base, g, [cands[i] for i in perm])
    d2["cand"].x[:, 0] = d1["cand"].x[perm, 0]
    with torch.no_grad():
        p1 = policy_log_probs(d1, net(d1)[0]).exp()
        p2 = policy_log_probs(d2, net(d2)[0]).exp()
    assert torch.allclose(p1[perm], p2, atol=1e-5)


def test_architecture_and_gradients(setup):
    feats, space, base = setup
    net = TagGNN()
    assert net.config["layers"] >= 3 and net.config["conv"] == "transformer"
    convs = [m for m in net.modules() if isinstance(m, TransformerConv)]
    assert len(convs) == 3 * 5 and all(c.lin_edge is not None for c in convs)  # edges enter keys and messages
    g = space.order[0]
    d = feats.state(base, g, space.candidates[g])
    logits, value = net(d)
    (logits.sum() + value.sum()).backward()
    no_grad = [n for n, p in net.named_parameters() if p.grad is None or float(p.grad.abs().sum()) == 0.0]
    # a chain model: every group has one incoming flow (and rev_flow) edge, so attention over them is a softmax
    # of one score and only the query/key maps of those relations get no gradient; the edge map still does
    # (it feeds the message), and so does every other parameter but PyG's skip map, unused with root_weight=False
    # (the encoder adds its own residual)
    assert all(".lin_skip." in n or ("flow" in n and (".lin_query." in n or ".lin_key." in n)) for n in no_grad), no_grad
    assert any(".lin_key." in n and "link" in n for n, p in net.named_parameters()
               if p.grad is not None and float(p.grad.abs().sum()) > 0)
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0
               for n, p in net.named_parameters() if "flow" in n and ".lin_edge." in n)


@pytest.mark.parametrize("conv, moves", [("transformer", True), ("gatv2", False)])
def test_flow_edge_features_reach_the_messages(setup, conv, moves):
    """On a chain every group has one incoming flow and rev_flow edge: attention over a single edge is 1 whatever
    the edge features, so they change the group embeddings only if they enter the messages (TransformerConv),
    not if they only weight the attention (GATv2)."""
    feats, space, base = setup
    torch.manual_seed(0)
    net = TagGNN(hidden=32, conv=conv).eval()
    d = feats.state(base)
    d2 = feats.state(base)
    for et in (("group", "flow", "group"), ("group", "rev_flow", "group")):
        d2[et].edge_attr = d2[et].edge_attr + 1.0
    with torch.no_grad():
        h1, h2 = net.embed(d)["group"], net.embed(d2)["group"]
    assert (not torch.allclose(h1, h2, atol=1e-6)) == moves


def test_training_steps_fit_a_visit_distribution(setup):
    feats, space, base = setup
    torch.manual_seed(0)
    net = TagGNN(hidden=32)
    g = space.order[0]
    d = feats.state(base, g, space.candidates[g])
    c = len(space.candidates[g])
    target = torch.zeros(c)
    target[c // 2], target[-1] = 0.75, 0.25
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(60):
        logits, value = net(d)
        loss = -(target * policy_log_probs(d, logits)).sum() + ((value - 0.5) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits, value = net(d)
        p = policy_log_probs(d, logits).exp()
    assert int(torch.argmax(p)) == c // 2
    assert float(p[c // 2] + p[-1]) > 0.8
    assert float(value[0]) == pytest.approx(0.5, abs=0.05)


def _tau_brute(x, y):
    num = 0
    tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        a, b = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        num += a * b
        tx += a != 0
        ty += b != 0
    return num / np.sqrt(tx * ty)


def test_kendall_tau_against_pair_counting():
    rng = np.random.default_rng(0)
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)  # 5 concordant, 1 discordant
    for _ in range(20):
        x = rng.integers(0, 5, 12).astype(float)
        y = rng.integers(0, 5, 12).astype(float)
        assert kendall_tau(x, y) == pytest.approx(_tau_brute(x, y))


def test_untrained_value_prior_head_predicts_the_estimate(setup, training):
    import math

    from tag.gnn.estimate import estimate

    feats, space, base = setup
    torch.manual_seed(3)
    net = TagGNN(hidden=32, layers=3, heads=4, value_prior=True, value_trunk=True).eval()
    strategies = [base] + [base.replace(g, space.candidates[g][-1]) for g in space.order[:3]]
    b = batch_graphs([feats.state(s) for s in strategies])
    with torch.no_grad():
        v = net(b, with_policy=False)[1]
    # the head's last layer starts at zero: the prediction is ln(time scale / estimated iteration), worked out here
    for s, got in zip(strategies, v.tolist()):
        est = estimate(feats.gg, feats.cluster, feats.cost, s, training).iteration_ms
        assert got == pytest.approx(math.log(feats.time_scale_ms / est), abs=1e-5)
    # policy-only states skip the estimate: zeros where it would be
    d = feats.state(base, space.order[0], space.candidates[space.order[0]], value_features=False)
    assert float(d.v_prior[0]) == 0.0 and np.all(d.u[0, -3:] == 0)
    full = feats.state(base, space.order[0], space.candidates[space.order[0]])
    assert np.all(full.u[0, -3:] > 0)
    assert np.array_equal(d["cand"].x, full["cand"].x) and np.array_equal(d["group"].x, full["group"].x)

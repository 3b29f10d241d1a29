"""Value-only training: the ranking loss by hand, the policy logits bit-identical after training, the separate
value trunk starting as a copy, checkpoints with and without it, and a fit that learns simulated orderings."""

from __future__ import annotations

import math

import pytest
import torch

from gnn_helpers import dp_instance
from tag.gnn.graph import batch_graphs
from tag.gnn.checkpoint import load_checkpoint, save_checkpoint
from tag.gnn.targets import speed_target
from tag.gnn.metrics import kendall_tau
from tag.gnn.model import TagGNN
from tag.gnn.value_fit import fit_value, pair_rank_loss, with_value_trunk
from tag.sim import simulate


@pytest.fixture(scope="module")
def setup(small_cnn_graph, training):
    gg, cluster, cost, batch, base, space, feats = dp_instance(small_cnn_graph, training, k=5)
    # every single-group change of the baseline that fits, labelled by simulation
    samples, seen = [], set()
    for g in space.order:
        for c in space.candidates[g]:
            s = base.replace(g, c)
            r = simulate(gg, cluster, cost, s, training)
            if s in seen or r.oom:
                continue
            seen.add(s)
            d = feats.state(s)
            d.value = torch.tensor([speed_target(r, feats.time_scale_ms)], dtype=torch.float32)
            samples.append(d)
    policy_states = [feats.state(base, g, space.candidates[g]) for g in space.order[:3]]
    return samples, policy_states


def test_pair_rank_loss_by_hand():
    pred = torch.tensor([0.0, 1.0, 5.0])
    target = torch.tensor([0.0, 2.0, 1.0])
    # one group: pairs (1 > 0): dp = 1; (2 > 0): dp = 5; (1 > 2): dp = 1 - 5 = -4
    want = (math.log1p(math.exp(-1)) + math.log1p(math.exp(-5)) + math.log1p(math.exp(4))) / 3
    assert float(pair_rank_loss(pred, target, torch.tensor([0, 0, 0]))) == pytest.approx(want, rel=1e-6)
    # separate groups: only the pair (1 > 0) of group 0 counts
    got = float(pair_rank_loss(pred, target, torch.tensor([0, 0, 1])))
    assert got == pytest.approx(math.log1p(math.exp(-1)), rel=1e-6)
    assert float(pair_rank_loss(pred, target, torch.tensor([0, 1, 2]))) == 0.0


def test_value_trunk_copy_starts_identical_and_round_trips(setup, tmp_path):
    samples, policy_states = setup
    torch.manual_seed(0)
    net = TagGNN(hidden=32, layers=2, heads=4).eval()
    twin = with_value_trunk(net)
    b = batch_graphs(policy_states)
    with torch.no_grad():
        l0, v0 = net(b)
        l1, v1 = twin(b)
    assert torch.equal(l0, l1) and torch.allclose(v0, v1, atol=1e-6)
    assert twin.config["value_trunk"] is True and "value_trunk" not in net.config
    save_checkpoint(str(tmp_path / "v.pt"), twin)
    back, obj = load_checkpoint(str(tmp_path / "v.pt"))
    assert back.vtrunk is not None and obj["config"]["value_trunk"] is True
    with torch.no_grad():
        l2, v2 = back(b)
    assert torch.equal(l1, l2) and torch.equal(v1, v2)
    save_checkpoint(str(tmp_path / "p.pt"), net)
    assert load_checkpoint(str(tmp_path / "p.pt"))[0].vtrunk is None


@pytest.mark.parametrize("trunk", [False, True])
def test_fit_learns_the_order_and_leaves_the_policy_untouched(setup, trunk):
    samples, policy_states = setup
    assert len(samples) >= 10
    torch.manual_seed(3)
    net = TagGNN(hidden=32, layers=2, heads=4).eval()
    if trunk:
        net = with_value_trunk(net)
    b = batch_graphs(policy_states)
    vb = batch_graphs(samples)
    with torch.no_grad():
        logits_before = net(b)[0].clone()
        tau_before = kendall_tau(net(vb, with_policy=False)[1].numpy(), vb.value.numpy())
    shared_before = {k: v.clone() for k, v in net.state_dict().items()
                     if not k.startswith(("value.", "vtrunk."))}
    stats = fit_value(net, [samples], minutes=5.0, max_steps=150, seed=0, lr=3e-3,
                      instances_per_batch=1, states_per_instance=len(samples))
    assert stats["steps"] == 150
    with torch.no_grad():
        logits_after = net(b)[0]
        tau_after = kendall_tau(net(vb, with_policy=False)[1].numpy(), vb.value.numpy())
    assert torch.equal(logits_before, logits_after)
    for k, v in net.state_dict().items():
        if k in shared_before:
            assert torch.equal(v, shared_before[k]), k
    assert all(p.requires_grad for p in net.parameters())
    assert tau_after > tau_before
    assert tau_after >= 0.7


def test_validation_keeps_the_best_step_including_none(setup):
    samples, _ = setup
    torch.manual_seed(4)
    net = TagGNN(hidden=32, layers=2, heads=4).eval()
    vb = batch_graphs(samples)
    before = [p.detach().clone() for p in net.value_parameters()]
    # validation targets in the reverse order of the training targets: learning the training order can only
    # lower the validation tau below its start, so the fit must hand the network back unchanged
    flipped = batch_graphs(samples)  # a second batch of the same states
    flipped.value = -vb.value
    with torch.no_grad():
        start = kendall_tau(net(vb, with_policy=False)[1].numpy(), flipped.value.numpy())
    stats = fit_value(net, [samples], minutes=5.0, max_steps=150, seed=0, lr=3e-3, instances_per_batch=1,
                      states_per_instance=len(samples), val=[flipped], eval_every=50)
    assert stats["val_tau_start"] == pytest.approx(start)
    if stats["best_step"] == 0:
        for p, b in zip(net.value_parameters(), before):
            assert torch.equal(p, b)
    else:  # a step that happened to raise the reversed order's tau: then it was kept for that reason
        assert stats["val_tau"] > start
    # with the training order as validation, the fit keeps a later, better step
    net2 = TagGNN(hidden=32, layers=2, heads=4).eval()
    stats2 = fit_value(net2, [samples], minutes=5.0, max_steps=150, seed=0, lr=3e-3, instances_per_batch=1,
                       states_per_instance=len(samples), val=[vb], eval_every=50)
    assert stats2["best_step"] > 0 and stats2["val_tau"] > stats2["val_tau_start"]
    with torch.no_grad():
        got = kendall_tau(net2(vb, with_policy=False)[1].numpy(), vb.value.numpy())
    assert got == pytest.approx(stats2["val_tau"])

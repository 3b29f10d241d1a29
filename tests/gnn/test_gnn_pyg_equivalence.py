"""The networks without PyG give what they gave with it: the shipped checkpoints load strictly, and TagGNN and the
structure network built on tag.gnn.layers give the logits and values of the same networks built on PyG's layers
(the second method; skipped where torch_geometric is not installed), on random graphs, on real planning states and
on batches; `batch_graphs` gives what PyG's `Batch.from_data_list` gives."""

from __future__ import annotations

import os

import pytest
import torch

from tag.gnn.checkpoint import STRUCTURE_FORMAT, default_checkpoint, default_structure_checkpoint, read_checkpoint
from tag.gnn.data import CAND_DIM, DEVICE_DIM, EDGE_DIMS, GLOBAL_DIM, GROUP_DIM, USES
from tag.gnn.graph import HeteroGraph, batch_graphs, to_torch
from tag.gnn.model import TagGNN, policy_log_probs
from tag.gnn.structure_features import ACTION_DIM
from tag.gnn.structure_model import ACT, StructureNet, action_log_probs

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOL = 1e-5


def _net_from(ckpt: str, fmt: str | None = None):
    obj = read_checkpoint(ckpt, fmt) if fmt else read_checkpoint(ckpt)
    net = StructureNet(**obj["config"]) if fmt else TagGNN(**obj["config"])
    net.load_state_dict(obj["model"], strict=True)
    return net.eval(), obj


def test_shipped_checkpoints_load_strictly():
    for ckpt, fmt in ((default_checkpoint(), None), (default_structure_checkpoint(), STRUCTURE_FORMAT)):
        net, obj = _net_from(ckpt, fmt)
        assert set(net.state_dict()) == set(obj["model"])
        assert all(torch.equal(net.state_dict()[k], v) for k, v in obj["model"].items())


# ---- PyG references -------------------------------------------------------------------------------------------

@pytest.fixture
def pyg_layers(monkeypatch):
    """Puts PyG's convolutions and segment ops where tag.gnn.model and structure_model look them up: networks built
    inside the fixture are the PyG implementation of the same architecture."""
    pnn = pytest.importorskip("torch_geometric.nn")
    utils = pytest.importorskip("torch_geometric.utils")
    import tag.gnn.model as model
    import tag.gnn.structure_model as structure_model

    def use_pyg():
        for name, obj in (("TransformerConv", pnn.TransformerConv), ("GATv2Conv", pnn.GATv2Conv),
                          ("HeteroConv", pnn.HeteroConv), ("scatter", utils.scatter), ("softmax", utils.softmax)):
            monkeypatch.setattr(model, name, obj)
        monkeypatch.setattr(structure_model, "softmax", utils.softmax)

    return use_pyg


def _pyg_net(pyg_layers, monkeypatch, make):
    pyg_layers()
    net = make()
    monkeypatch.undo()
    return net


def _random_state(seed: int, with_cand: bool = True, with_act: bool = False) -> HeteroGraph:
    """A random graph of the networks' node and edge types (some destinations without edges, one "current"
    group)."""
    g = torch.Generator().manual_seed(seed)
    K = int(torch.randint(2, 9, (1,), generator=g))
    n = int(torch.randint(1, 7, (1,), generator=g))
    d = HeteroGraph()
    d["group"].x = torch.randn(K, GROUP_DIM, generator=g)
    d["group"].x[:, 8] = 0.0
    d["group"].x[int(torch.randint(0, K, (1,), generator=g)), 8] = 1.0
    d["device"].x = torch.randn(n, DEVICE_DIM, generator=g)
    counts = {"group": K, "device": n}
    for et, dim in EDGE_DIMS.items():
        s, _, t = et
        e = int(torch.randint(0, 3 * max(counts[s], counts[t]), (1,), generator=g))
        d[et].edge_index = torch.stack([torch.randint(0, counts[s], (e,), generator=g),
                                        torch.randint(0, counts[t], (e,), generator=g)])
        d[et].edge_attr = torch.randn(e, dim, generator=g)
    if with_cand:
        C = int(torch.randint(1, 6, (1,), generator=g))
        d["cand"].x = torch.randn(C, CAND_DIM, generator=g)
        e = int(torch.randint(C, 3 * C + 1, (1,), generator=g))
        d[USES].edge_index = torch.stack([torch.randint(0, n, (e,), generator=g), torch.randint(0, C, (e,), generator=g)])
        d[USES].edge_attr = torch.rand(e, 1, generator=g)
    if with_act:
        d[ACT].x = torch.randn(int(torch.randint(1, 7, (1,), generator=g)), ACTION_DIM, generator=g)
    d.u = torch.randn(1, GLOBAL_DIM, generator=g)
    d.v_prior = torch.randn(1, generator=g)
    return d


def _same(a, b):
    return a.shape == b.shape and torch.allclose(a, b, atol=TOL, rtol=0)


@pytest.mark.parametrize("config", [dict(hidden=32, layers=2, heads=4), dict(hidden=16, layers=1, heads=2, conv="gatv2"),
                                    dict(hidden=16, layers=2, heads=2, value_trunk=True, value_prior=True)])
def test_seeded_tag_gnn_starts_from_pygs_weights(pyg_layers, monkeypatch, config):
    torch.manual_seed(7)
    ours = TagGNN(**config)
    torch.manual_seed(7)
    ref = _pyg_net(pyg_layers, monkeypatch, lambda: TagGNN(**config))
    a, b = ours.state_dict(), ref.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_shipped_tag_gnn_matches_pyg_on_random_graphs_and_batches(pyg_layers, monkeypatch):
    ours, obj = _net_from(default_checkpoint())
    ref = _pyg_net(pyg_layers, monkeypatch, lambda: TagGNN(**obj["config"]))
    ref.load_state_dict(obj["model"], strict=True)
    ref.eval()
    states = [_random_state(s) for s in range(12)]
    with torch.no_grad():
        for d in states + [batch_graphs(states[:5]), batch_graphs(states)]:
            la, va = ours(d)
            pyg_layers()
            lb, vb = ref(d)
            pb = policy_log_probs(d, lb)
            monkeypatch.undo()
            assert _same(la, lb) and _same(va, vb)
            assert _same(policy_log_probs(d, la), pb)


@pytest.mark.parametrize("conv", ["transformer", "gatv2"])
def test_fresh_tag_gnn_matches_pyg_in_training_gradients(pyg_layers, monkeypatch, conv):
    torch.manual_seed(3)
    ours = TagGNN(hidden=16, layers=2, heads=2, conv=conv, value_prior=True)
    torch.manual_seed(3)
    ref = _pyg_net(pyg_layers, monkeypatch, lambda: TagGNN(hidden=16, layers=2, heads=2, conv=conv, value_prior=True))
    b = batch_graphs([_random_state(s) for s in range(20, 26)])
    target = torch.linspace(-1, 1, 6)
    for net, pyg in ((ours, False), (ref, True)):
        if pyg:
            pyg_layers()
        logits, value = net(b)
        (policy_log_probs(b, logits).sum() + ((value - target) ** 2).sum()).backward()
        monkeypatch.undo()
    grads = {k: p.grad for k, p in ref.named_parameters()}
    for k, p in ours.named_parameters():
        ga, gb = [g if g is not None else torch.zeros_like(p) for g in (p.grad, grads[k])]
        assert torch.allclose(ga, gb, atol=TOL), k


@pytest.fixture(scope="module")
def real_instance(training):
    """A planning instance as `tag plan` builds one: small_cnn on heterog8 with the roofline cost model."""
    from tag.gnn.selfplay import load_instance
    from tag.gnn.train import load_cluster

    cluster = load_cluster(os.path.join(ROOT, "datasets", "topologies", "heterog8.json"))
    return load_instance(os.path.join(ROOT, "datasets", "models", "small_cnn.onnx"), cluster, training)


def test_shipped_networks_match_pyg_on_real_planning_states(pyg_layers, monkeypatch, real_instance, training):
    from tag.gnn.priors import make_priors_fn
    from tag.gnn.structure_priors import PointBuilder, make_structure_priors_fn
    from tag.search.baselines import build_baseline
    from tag.search.space import build_space

    inst = real_instance
    base = build_baseline("dp-even", inst.gg, inst.cluster, inst.cost, training, inst.batch)
    space = build_space(inst.gg, inst.cluster, inst.cost, inst.batch, base)
    ours, obj = _net_from(default_checkpoint())
    ref = _pyg_net(pyg_layers, monkeypatch, lambda: TagGNN(**obj["config"]))
    ref.load_state_dict(obj["model"], strict=True)
    ref.eval()
    sours, sobj = _net_from(default_structure_checkpoint(), STRUCTURE_FORMAT)
    sref = _pyg_net(pyg_layers, monkeypatch, lambda: StructureNet(**sobj["config"]))
    sref.load_state_dict(sobj["model"], strict=True)
    sref.eval()

    groups = space.order[:4]
    # the per-group priors `tag plan` takes, in policy and value modes (value: a batch of every child's state)
    for mode in ("policy", "value"):
        fa = make_priors_fn(ours, inst.features, uniform_mix=0.2, mode=mode)
        fb = make_priors_fn(ref, inst.features, uniform_mix=0.2, mode=mode)
        for g in groups:
            pa, va = fa(base, g, space.candidates[g])
            pyg_layers()
            pb, vb = fb(base, g, space.candidates[g])
            monkeypatch.undo()
            assert pa == pytest.approx(pb, abs=TOL) and (va is None) == (vb is None)
            assert va is None or va == pytest.approx(vb, abs=TOL)
    # the structure network's priors and values at real decision points, one at a time and batched
    points = PointBuilder(inst.gg, inst.cluster, inst.cost, training, inst.batch)
    names = {"kind": ["keep", "data", "pipeline", "placement"],
             "micro": ["keep", "pipeline-S2-m4-gpipe", "pipeline-S2-m8-1f1b", "pipeline-S2-m8-kfkb2"]}
    strategies = [base] + [base.replace(g, space.candidates[g][-1]) for g in groups]
    sa, sb = make_structure_priors_fn(sours, points), make_structure_priors_fn(sref, points)
    batch = []
    for s in strategies:
        for level, ns in names.items():
            pa, va = sa(s, level, ns)
            pyg_layers()
            pb, vb = sb(s, level, ns)
            monkeypatch.undo()
            assert pa == pytest.approx(pb, abs=TOL) and va == pytest.approx(vb, abs=TOL)
            batch.append(points.point(s, level, ns))
    b = batch_graphs(batch)
    with torch.no_grad():
        la, va = sours(b)
        pyg_layers()
        lb, vb = sref(b)
        pb = action_log_probs(b, lb)
        monkeypatch.undo()
    assert _same(la, lb) and _same(va, vb) and _same(action_log_probs(b, la), pb)


def _to_pyg(d: HeteroGraph):
    from torch_geometric.data import HeteroData

    out = HeteroData()
    for t, s in d.nodes.items():
        out[t].x = s.x
        if s.target is not None:
            out[t].target = s.target
    for et, s in d.edges.items():
        out[et].edge_index = s.edge_index
        out[et].edge_attr = s.edge_attr
    for name in ("u", "v_prior", "value", "inst"):
        if getattr(d, name) is not None:
            setattr(out, name, getattr(d, name))
    return out


def test_batch_graphs_matches_pygs_batch(real_instance, training):
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Batch

    from tag.search.baselines import build_baseline
    from tag.search.space import build_space

    inst = real_instance
    base = build_baseline("dp-even", inst.gg, inst.cluster, inst.cost, training, inst.batch)
    space = build_space(inst.gg, inst.cluster, inst.cost, inst.batch, base)
    states = [to_torch(inst.features.state(base, g, space.candidates[g])) for g in space.order[:3]]
    for k, d in enumerate(states):
        d["cand"].target = torch.full((d["cand"].num_nodes,), 1.0)
        d.value = torch.tensor([0.1 * k])
        d.inst = torch.tensor([k])
    states += [_random_state(s) for s in range(3)]
    for d in states[3:]:
        d["cand"].target = torch.zeros(d["cand"].num_nodes)
        d.value, d.inst = torch.tensor([1.0]), torch.tensor([9])
    ours, theirs = batch_graphs(states), Batch.from_data_list([_to_pyg(d) for d in states])
    for t, s in ours.nodes.items():
        for f in ("x", "batch", "target"):
            if getattr(s, f) is None:
                assert f not in theirs[t], (t, f)
            else:
                assert torch.equal(getattr(s, f), getattr(theirs[t], f)), (t, f)
    for et, s in ours.edges.items():
        assert torch.equal(s.edge_index, theirs[et].edge_index) and torch.equal(s.edge_attr, theirs[et].edge_attr), et
    for name in ("u", "v_prior", "value", "inst"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name

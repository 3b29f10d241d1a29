"""Planning's numpy networks (`tag.gnn.infer`) against the torch modules they mirror, and the torch-free checkpoint
reader (`tag.gnn.pt_reader`) against ``torch.load``: the torch side is the second method."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tag.errors import InputError
from tag.gnn.checkpoint import (STRUCTURE_FORMAT, default_checkpoint, default_structure_checkpoint, load_checkpoint,
                                load_inference_net, save_checkpoint)
from tag.gnn.graph import HeteroGraph
from tag.gnn.infer import NumpyStructureNet, NumpyTagGNN, Segments, expected_shapes, softmax_priors
from tag.gnn.model import TagGNN, policy_log_probs
from tag.gnn.pt_reader import read_torch_file
from tag.gnn.structure_model import StructureNet, log_softmax_by
from test_gnn_pyg_equivalence import _random_state

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOL = 2e-5  # float32 with another summation order


def _numpy(d: HeteroGraph) -> HeteroGraph:
    """A torch graph's arrays as numpy (the inverse of `to_torch`)."""
    out = HeteroGraph()
    for t, s in d.nodes.items():
        out[t].x = None if s.x is None else s.x.numpy()
    for et, s in d.edges.items():
        out[et].edge_index, out[et].edge_attr = s.edge_index.numpy(), s.edge_attr.numpy()
    out.u, out.v_prior = d.u.numpy(), d.v_prior.numpy()
    return out


def _equal_trees(x, y) -> int:
    """Asserts a numpy-tensored object equals a torch-tensored one (tensors exactly, dtype and shape included);
    returns the number of tensors compared."""
    if isinstance(y, torch.Tensor):
        assert isinstance(x, np.ndarray) and x.dtype == y.numpy().dtype and x.shape == tuple(y.shape)
        assert np.array_equal(x, y.numpy())
        return 1
    if isinstance(y, dict):
        assert list(x) == list(y)
        return sum(_equal_trees(x[k], y[k]) for k in y)
    if isinstance(y, (list, tuple)):
        assert len(x) == len(y)
        return sum(_equal_trees(a, b) for a, b in zip(x, y))
    assert x == y
    return 0


@pytest.mark.parametrize("path", [default_checkpoint(), default_structure_checkpoint()])
def test_reader_gives_torch_loads_tensors_exactly(path):
    n = _equal_trees(read_torch_file(path), torch.load(path, map_location="cpu", weights_only=True))
    assert n > 300  # model and optimizer state: every tensor compared


def test_reader_reads_views_offsets_and_0d_tensors(tmp_path):
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    obj = {"t": base.t(), "row": base[2], "slice": base[1:3, ::2], "step": torch.tensor(7.0),
           "ints": torch.tensor([3, -1], dtype=torch.int64), "half": torch.ones(3, dtype=torch.float16), "n": 3}
    torch.save(obj, tmp_path / "x.pt")
    got = read_torch_file(str(tmp_path / "x.pt"))
    assert _equal_trees(got, obj) == 6
    assert got["t"][1, 2] == 13.0 and got["step"].shape == ()


def test_reader_refuses_other_objects_and_files(tmp_path):
    torch.save({"f": torch.nn.Linear(2, 2)}, tmp_path / "module.pt")
    with pytest.raises(ValueError, match="unsupported global"):
        read_torch_file(str(tmp_path / "module.pt"))
    (tmp_path / "text.pt").write_text("not a zip")
    with pytest.raises(ValueError, match="zip"):
        read_torch_file(str(tmp_path / "text.pt"))


def test_segments_against_a_loop():
    rng = np.random.default_rng(0)
    index = rng.integers(0, 5, size=40)
    index[index == 3] = 4  # node 3 gets no edge
    vals = rng.normal(size=(40, 2)).astype(np.float32)
    seg = Segments(index, 6)
    want_sum = np.zeros((6, 2), np.float32)
    for i, v in zip(index, vals):
        want_sum[i] += v
    assert np.allclose(seg.sum(vals), want_sum, atol=1e-5)
    soft = seg.softmax(vals)
    for node in range(6):
        m = index == node
        if m.any():
            e = np.exp(vals[m] - vals[m].max(axis=0))
            assert np.allclose(soft[m], e / e.sum(axis=0), atol=1e-6)


@pytest.mark.parametrize("config", [dict(hidden=32, layers=2, heads=4), dict(hidden=16, layers=1, heads=2, conv="gatv2"),
                                    dict(hidden=16, layers=3, heads=4, value_prior=True)])
def test_tag_gnn_matches_torch_on_random_states(config):
    torch.manual_seed(3)
    net = TagGNN(**config).eval()
    for p in net.value[-1].parameters():  # value_prior's head starts at zero: give it weights to compare
        torch.nn.init.normal_(p)
    mine = NumpyTagGNN(net.config, {k: v.numpy() for k, v in net.state_dict().items()})
    for seed in range(6):
        d = _random_state(seed)
        with torch.no_grad():
            logits, value = net(d)
            want = policy_log_probs(d, logits).exp().double().numpy()
        p, v = mine.priors(_numpy(d))
        assert np.allclose(p, want, atol=TOL, rtol=0) and abs(p.sum() - 1) < 1e-5
        assert v == pytest.approx(float(value[0]), abs=TOL)


def test_structure_net_matches_torch_on_random_states():
    torch.manual_seed(4)
    net = StructureNet(hidden=32, layers=2, heads=4).eval()
    torch.nn.init.normal_(net.value[-1].weight)
    mine = NumpyStructureNet(net.config, {k: v.numpy() for k, v in net.state_dict().items()})
    for seed in range(6):
        d = _random_state(seed, with_cand=False, with_act=True)
        x = d["act"].x
        ab = torch.zeros(len(x), dtype=torch.long)
        with torch.no_grad():
            s = net.state_embedding(d)
            logits, value = net.heads(s, x, ab, d.v_prior.reshape(-1))
            want = log_softmax_by(logits, ab).exp().double().numpy()
        nd = _numpy(d)
        s_np = mine.state_embedding(nd)
        assert np.allclose(s_np, s.numpy(), atol=TOL, rtol=0)
        got_logits, got_value = mine.heads(s_np, x.numpy(), float(nd.v_prior[0]))
        assert np.allclose(got_logits, logits.numpy(), atol=TOL, rtol=0)
        assert got_value == pytest.approx(float(value[0]), abs=TOL)
        assert np.allclose(softmax_priors(got_logits), want, atol=TOL, rtol=0)


def test_shipped_networks_give_torchs_priors_on_real_planning_states(training):
    """Both shipped checkpoints through `load_priors_fn` / `load_structure_priors_fn` (numpy) against the same
    closures over the torch modules, on small_cnn / heterog8 states as `tag plan` builds them."""
    from tag.gnn.priors import make_priors_fn, search_order
    from tag.gnn.data import InstanceFeatures
    from tag.gnn.selfplay import load_instance
    from tag.gnn.structure_priors import PointBuilder, make_structure_priors_fn
    from tag.gnn.train import load_cluster
    from tag.search.baselines import build_baseline
    from tag.search.space import build_space

    cluster = load_cluster(os.path.join(ROOT, "datasets", "topologies", "heterog8.json"))
    inst = load_instance(os.path.join(ROOT, "datasets", "models", "small_cnn.onnx"), cluster, training)
    base = build_baseline("dp-even", inst.gg, inst.cluster, inst.cost, training, inst.batch)
    space = build_space(inst.gg, inst.cluster, inst.cost, inst.batch, base)
    order = search_order(inst.gg, inst.cluster, inst.cost, training, inst.batch)
    feats = InstanceFeatures(inst.gg, inst.cluster, inst.cost, inst.batch, training.optimizer, order=order,
                             training=training)
    torch_fn = make_priors_fn(load_checkpoint(default_checkpoint())[0], feats, uniform_mix=0.2)
    numpy_fn = make_priors_fn(load_inference_net(default_checkpoint()), feats, uniform_mix=0.2)
    for g in space.order[:4]:
        p_t, v_t = torch_fn(base, g, space.candidates[g])
        p_n, v_n = numpy_fn(base, g, space.candidates[g])
        assert np.allclose(p_n, p_t, atol=TOL, rtol=0) and (v_t is None) == (v_n is None)
    points = PointBuilder(inst.gg, inst.cluster, inst.cost, training, inst.batch)
    s_torch = make_structure_priors_fn(load_checkpoint(default_structure_checkpoint(), STRUCTURE_FORMAT)[0], points)
    s_numpy = make_structure_priors_fn(load_inference_net(default_structure_checkpoint(), STRUCTURE_FORMAT), points)
    for level, names in (("kind", ["data", "pipeline", "placement"]), ("layout", ["dp-even", "dp-proportional"])):
        (p_t, v_t), (p_n, v_n) = s_torch(base, level, names), s_numpy(base, level, names)
        assert np.allclose(p_n, p_t, atol=TOL, rtol=0) and v_n == pytest.approx(v_t, abs=TOL)


def test_inference_net_refuses_a_checkpoint_that_does_not_fit_its_config(tmp_path):
    torch.manual_seed(0)
    path = str(tmp_path / "net.pt")
    net = TagGNN(hidden=16, layers=1, heads=2)
    save_checkpoint(path, net)
    assert isinstance(load_inference_net(path), NumpyTagGNN)
    state = net.state_dict()
    state["cand.0.weight"] = state["cand.0.weight"][:, :-1]
    obj = torch.load(path, weights_only=True)
    obj["model"] = state
    torch.save(obj, path)
    with pytest.raises(InputError, match="cand.0.weight"):
        load_inference_net(path)
    with pytest.raises(InputError, match="format"):
        load_inference_net(path, STRUCTURE_FORMAT)


def test_expected_shapes_are_the_torch_modules_parameters():
    for config in (dict(hidden=32, layers=2, heads=4), dict(hidden=16, layers=1, heads=2, conv="gatv2")):
        params = {k: tuple(v.shape) for k, v in TagGNN(**config).state_dict().items()}
        want = expected_shapes(config)
        assert set(params) == set(want) and all(params[k] == s for k, s in want.items())
    params = {k: tuple(v.shape) for k, v in StructureNet(hidden=16, layers=1, heads=2).state_dict().items()}
    want = expected_shapes(dict(hidden=16, layers=1, heads=2), structure=True)
    assert all(params[k] == s for k, s in want.items())
    assert {k for k in params if not k.startswith("gnn.") or k.split(".")[1] in ("enc", "convs", "norms")} <= set(want)


def test_inference_net_falls_back_to_torch_for_an_archive_the_reader_refuses(tmp_path, monkeypatch):
    import tag.gnn.pt_reader as reader

    torch.manual_seed(0)
    path = str(tmp_path / "net.pt")
    net = TagGNN(hidden=16, layers=1, heads=2)
    save_checkpoint(path, net)

    def refuse(p):
        raise ValueError("unsupported global x.y in the checkpoint")

    monkeypatch.setattr(reader, "read_torch_file", refuse)
    mine = load_inference_net(path)
    assert all(np.array_equal(mine.w.state[k], v.numpy()) for k, v in net.state_dict().items() if k in mine.w.state)

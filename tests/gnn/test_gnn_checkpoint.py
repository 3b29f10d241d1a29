"""Checkpoints: round trip, card, feature-version mismatch and non-checkpoints as clear input errors."""

from __future__ import annotations

import json
import os

import pytest
import torch

from gnn_helpers import FlopsCost, topology
from tag.errors import InputError
from tag.gnn.checkpoint import default_checkpoint, load_checkpoint, read_checkpoint, save_checkpoint
from tag.gnn.data import FEATURE_VERSION, InstanceFeatures
from tag.gnn.model import TagGNN
from tag.graph.coarsen import coarsen
from tag.search.baselines import build_baseline
from tag.search.space import build_space
from tag.topology import parse_topology


def test_round_trip_gives_the_same_network_and_a_card(tmp_path, small_cnn_graph, training):
    gg = coarsen(small_cnn_graph, k=4, n_devices=4)
    cluster = parse_topology(topology(), "t.json")
    cost = FlopsCost(gg)
    base = build_baseline("dp-even", gg, cluster, cost, training, 64)
    space = build_space(gg, cluster, cost, 64, base)
    feats = InstanceFeatures(gg, cluster, cost, 64, order=space.order)
    g = space.order[0]
    data = feats.state(base, g, space.candidates[g])
    torch.manual_seed(3)
    net = TagGNN(hidden=32, layers=3, heads=2).eval()
    opt = torch.optim.Adam(net.parameters())
    path = str(tmp_path / "ck.pt")
    save_checkpoint(path, net, optimizer=opt, progress={"episodes": 7}, card={"data": {"models": ["x"]}})
    net2, obj = load_checkpoint(path)
    assert net2.config == {"hidden": 32, "layers": 3, "heads": 2, "conv": "transformer"}
    assert obj["progress"]["episodes"] == 7 and obj["optimizer"] is not None
    with torch.no_grad():
        a, b = net(data), net2(data)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    card = json.load(open(path + ".card.json"))
    assert card["feature_version"] == FEATURE_VERSION and card["data"] == {"models": ["x"]}


def test_other_feature_version_is_a_clear_error(tmp_path):
    path = str(tmp_path / "old.pt")
    save_checkpoint(path, TagGNN(hidden=16, heads=2))
    obj = torch.load(path, weights_only=True)
    obj["feature_version"] = FEATURE_VERSION + 1
    torch.save(obj, path)
    with pytest.raises(InputError) as e:
        read_checkpoint(path)
    assert "feature_version" in str(e.value) and str(FEATURE_VERSION + 1) in str(e.value)


def test_not_a_checkpoint_and_missing_file(tmp_path):
    bad = tmp_path / "x.pt"
    bad.write_text("hello")
    with pytest.raises(InputError, match="x.pt: file: expected a tag GNN checkpoint"):
        load_checkpoint(str(bad))
    torch.save({"format": "other"}, str(tmp_path / "y.pt"))
    with pytest.raises(InputError, match="format"):
        load_checkpoint(str(tmp_path / "y.pt"))
    with pytest.raises(InputError, match="no such file"):
        load_checkpoint(str(tmp_path / "missing.pt"))


def test_shipped_weights_are_found_and_load():
    path = default_checkpoint()
    assert path is not None and os.path.isfile(path)
    assert os.path.getsize(path) < 8e6  # a few MB at most
    net, obj = load_checkpoint(path)
    assert obj["card"]["data"]["models"] and obj["progress"]["episodes"] > 0

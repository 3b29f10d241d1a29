"""End to end on new hardware: fine-tune the shipped weights on profiled costs, then `tag plan --gnn` loads it;
a checkpoint of another feature version fails `tag plan` with exit 2 and one line."""

from __future__ import annotations

import json
import os

import pytest
import torch

from tag.cli import main
from tag.cost.profile_db import OpProfile, ProfileDB, op_signature, save
from tag.gnn.checkpoint import default_checkpoint
from tag.gnn.data import FEATURE_VERSION

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MLP = os.path.join(ROOT, "datasets", "models", "mlp.onnx")


@pytest.fixture(scope="module")
def cpu_machine(tmp_path_factory):
    """A profile of this machine's `cpu` device (every op of the MLP, 3 row counts) and a 2-core topology."""
    from tag.graph import load_model
    d = tmp_path_factory.mktemp("hw")
    graph = load_model(MLP, n_devices=2)
    ops = {}
    for op in graph.ops:
        if op.fwd_flops_per_row > 0:
            ops[op_signature(op, graph)] = OpProfile([1, 16, 64], [0.02, 0.2, 0.8], [0.04, 0.4, 1.6])
    assert ops
    profile = str(d / "cpu.json")
    save(ProfileDB("cpu", 1, {"cpu": "test"}, ops), profile)
    topo_dir = d / "topos"
    topo_dir.mkdir()
    topo = {"version": 1, "name": "box", "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 2}]}]}
    (topo_dir / "box.json").write_text(json.dumps(topo))
    return profile, str(topo_dir), str(topo_dir / "box.json")


def test_finetune_on_profiled_costs_then_plan_with_it(tmp_path, cpu_machine, capsys):
    profile, topo_dir, topo = cpu_machine
    shipped = default_checkpoint()
    out = str(tmp_path / "ft.pt")
    rc = main(["train", "--init", shipped, "--profile", profile, "--models", MLP, "--topologies", topo_dir,
               "--episodes", "1", "--playouts", "8", "--groups", "3", "-o", out, "--json"])
    assert rc == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["episodes"] == 1 and metrics["steps"] > 0 and os.path.isfile(out)
    card = json.load(open(out + ".card.json"))
    assert card["data"]["profile"] == "cpu.json" and card["data"]["init"] == os.path.basename(shipped)
    # fine-tuning moved the weights
    a = torch.load(shipped, weights_only=True)["model"]
    b = torch.load(out, weights_only=True)["model"]
    assert any(not torch.equal(a[k], b[k]) for k in a)
    rc = main(["plan", MLP, topo, "--gnn", out, "--profile", profile, "--playouts", "6", "--no-refine", "--no-sfb",
               "--json"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["search"]["gnn"] == out and "mcts+gnn" in plan["search"]["method"]  # the per-group tree's priors
    assert plan["predicted"]["cost_model"].startswith("profile:")


def test_plan_with_a_checkpoint_of_another_feature_version_exits_2(tmp_path, cpu_machine, capsys):
    _, _, topo = cpu_machine
    obj = torch.load(default_checkpoint(), weights_only=True)
    obj["feature_version"] = FEATURE_VERSION + 5
    bad = str(tmp_path / "old.pt")
    torch.save(obj, bad)
    rc = main(["plan", MLP, topo, "--gnn", bad, "--playouts", "2", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "feature_version" in err

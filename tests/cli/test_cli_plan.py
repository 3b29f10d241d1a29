"""`tag plan` end to end on a small shipped model: baseline plans, errors (byte-identical plans, idle and under
load: test_plan_determinism.py)."""

import json
import os

from tag.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "datasets/models/mlp.onnx")
TOPO = os.path.join(ROOT, "datasets/topologies/heterog8.json")


def _plan(tmp_path, name, *extra):
    out = tmp_path / name
    assert main(["plan", MODEL, TOPO, "-o", str(out), "--no-gnn", *extra]) == 0
    return out.read_text()


def test_plan_json_output_and_baseline_plan_simulates(tmp_path, capsys):
    out = tmp_path / "dp.json"
    assert main(["plan", MODEL, TOPO, "--baseline", "dp-even", "-o", str(out), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["version"] == 2 and obj["search"]["method"] == "baseline:dp-even"
    assert obj["predicted"]["iteration_ms"] == obj["baselines"]["dp-even"]["iteration_ms"]
    assert all(len(d["rows"]) == 8 for d in obj["decisions"])
    assert main(["simulate", MODEL, TOPO, "--plan", str(out), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert abs(sim["iteration_ms"] - obj["predicted"]["iteration_ms"]) < 1e-3  # plan.json rounds to 4 decimals


def test_plan_bad_input_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "t.json"
    bad.write_text('{"version": 1, "machines": [{"name": "a", "devices": [{"type": "V100-16GB", "count": 0}]}]}')
    assert main(["plan", MODEL, str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "t.json" in err[0] and "machines[0].devices[0].count" in err[0]
    assert main(["plan", MODEL, TOPO, "--playouts", "-3"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_structure_gnn_checkpoint_is_checked_and_recorded(tmp_path, capsys):
    """--structure-gnn: a missing file or one with --no-gnn is a one-line exit 2 naming the flag; a checkpoint that
    exists is the one plan.json search.structure_gnn names, and the structure tree took its priors."""
    assert main(["plan", MODEL, TOPO, "--structure-gnn", str(tmp_path / "none.pt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none.pt" in err[0] and "--structure-gnn" in err[0] and "no such file" in err[0]
    from tag.gnn.shipped import SHIPPED_STRUCTURE_NAME, shipped_checkpoint

    ckpt = shipped_checkpoint(SHIPPED_STRUCTURE_NAME)
    assert main(["plan", MODEL, TOPO, "--no-gnn", "--structure-gnn", ckpt]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--structure-gnn" in err[0] and "--no-gnn" in err[0]
    copy = tmp_path / "mine.pt"
    copy.write_bytes(open(ckpt, "rb").read())
    out = tmp_path / "p.json"
    assert main(["plan", MODEL, TOPO, "--structure-gnn", str(copy), "--playouts", "8", "--simulations", "20",
                 "-o", str(out)]) == 0
    search = json.loads(out.read_text())["search"]
    assert search["structure_gnn"] == str(copy) and search["structure"]["priors"] == "structure network"


def test_above_the_gnn_size_limit_both_trees_search_uniformly(tmp_path, capsys, monkeypatch):
    """heterog8 has 8 devices: with the limit set to 4, tag plan loads no network, says so once on stderr and in
    search.warnings, and plan.json records no checkpoint and uniform structure priors."""
    import tag.search.planner as planner

    monkeypatch.setattr(planner, "GNN_MAX_DEVICES", 4)
    out = tmp_path / "p.json"
    assert main(["plan", MODEL, TOPO, "--playouts", "8", "--simulations", "20", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("GNN priors not used: 8 devices is above the networks' size limit (4)") == 1
    search = json.loads(out.read_text())["search"]
    assert search["gnn"] is None and search["structure_gnn"] is None
    assert search["structure"]["priors"] == "uniform" and "+gnn" not in search["method"]
    assert any(w.startswith("GNN priors not used") for w in search["warnings"])

"""No silent fallback in `tag plan`: a GNN that cannot load is an exit-2 error naming --no-gnn; an SFB solver
(ortools) that cannot import is a warning on stderr that the plan records in `search.warnings`.

Failures are simulated by putting None in sys.modules (the next import of that name raises ImportError)."""

import json
import os
import sys

import tag.compression
from tag.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "datasets/models/mlp.onnx")
TOPO = os.path.join(ROOT, "datasets/topologies/heterog8.json")
SMALL = ["--playouts", "5", "--simulations", "20"]


def test_plan_needs_no_torch_for_the_networks(tmp_path, monkeypatch):
    """Planning evaluates both shipped networks in numpy (`tag.gnn.infer`): with torch unimportable, the plan is the
    same as with it."""
    out, ref = tmp_path / "p.json", tmp_path / "ref.json"
    assert main(["plan", MODEL, TOPO, "-o", str(ref), "--jobs", "1", *SMALL]) == 0
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["plan", MODEL, TOPO, "-o", str(out), "--jobs", "1", *SMALL]) == 0
    got, want = json.loads(out.read_text()), json.loads(ref.read_text())
    assert got["search"]["gnn"] is not None
    for p in (got, want):
        p["search"].pop("seconds")
    assert got == want


def test_missing_shipped_checkpoint_is_exit_2(tmp_path, monkeypatch, capsys):
    import tag.gnn.checkpoint

    monkeypatch.setattr(tag.gnn.checkpoint, "default_checkpoint", lambda: None)
    assert main(["plan", MODEL, TOPO, *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--no-gnn" in err[0] and "checkpoint" in err[0]


def test_missing_ortools_warns_and_the_plan_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ortools.sat.python.cp_model", None)
    monkeypatch.setitem(sys.modules, "ortools.sat.python.cp_model_helper", None)  # what SFB imports (tag.compression.cpsat)

    def must_not_run(*a, **k):
        raise AssertionError("SFB selection ran without its solver")
    monkeypatch.setattr(tag.compression, "select_sfb", must_not_run)
    out = tmp_path / "p.json"
    assert main(["plan", MODEL, TOPO, "-o", str(out), "--no-gnn", *SMALL]) == 0
    err = [l for l in capsys.readouterr().err.splitlines() if "warning" in l]
    assert len(err) == 1 and "ortools" in err[0] and "--no-sfb" in err[0]
    search = json.loads(out.read_text())["search"]
    assert len(search["warnings"]) == 1 and "--no-sfb" in search["warnings"][0]
    assert "sfb" not in search["method"]
    # with --no-sfb nothing is missing: no warning
    assert main(["plan", MODEL, TOPO, "-o", str(out), "--no-gnn", "--no-sfb", *SMALL]) == 0
    assert "warning" not in capsys.readouterr().err
    assert json.loads(out.read_text())["search"]["warnings"] == []


def test_sfb_with_its_solver_records_no_warning(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["plan", MODEL, TOPO, "-o", str(out), "--no-gnn", *SMALL]) == 0
    search = json.loads(out.read_text())["search"]
    assert search["warnings"] == [] and search["capped"] is False
    assert search["playouts"] == 5 and isinstance(search["simulations"], int)

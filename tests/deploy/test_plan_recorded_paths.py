"""plan.json records its model, topology and profile paths relative to the plan's directory, so a plan moved with
its inputs, or read from another working directory, finds them; plans that recorded paths as given still resolve."""

from __future__ import annotations

import json
import os

from tag.cli import main
from tag.deploy.job import DeployOptions, prepare_job, topology_path_of
from tag.strategy.planfile import recorded_path, resolve_recorded

MODEL = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "mlp.onnx"))
TOPO = {"version": 1, "name": "two", "machines": [
    {"name": "m0", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10}]}


def test_recorded_path_is_relative_to_the_plans_directory(tmp_path):
    (tmp_path / "out").mkdir()
    plan = str(tmp_path / "out" / "p.json")
    assert recorded_path(str(tmp_path / "t.json"), plan) == os.path.join("..", "t.json")
    assert recorded_path(str(tmp_path / "out" / "sub" / "t.json"), plan) == os.path.join("sub", "t.json")
    assert recorded_path("given/t.json", None) == "given/t.json"  # standard output: as given


def test_a_plan_written_elsewhere_finds_its_topology_from_any_directory(tmp_path, monkeypatch):
    for d in ("work", "out", "elsewhere"):
        (tmp_path / d).mkdir()
    (tmp_path / "work" / "two.json").write_text(json.dumps(TOPO))
    monkeypatch.chdir(tmp_path / "work")
    assert main(["plan", MODEL, "two.json", "--baseline", "dp-even", "--batch-size", "8", "--optimizer", "momentum",
                 "-o", os.path.join("..", "out", "p.json")]) == 0
    raw = json.loads((tmp_path / "out" / "p.json").read_text())
    assert raw["topology"]["path"] == os.path.join("..", "work", "two.json")
    assert raw["model"]["path"] == os.path.relpath(MODEL, str(tmp_path / "out"))
    monkeypatch.chdir(tmp_path / "elsewhere")  # neither the plan's directory nor the one it was made in
    found = topology_path_of(os.path.join("..", "out", "p.json"), None)
    assert os.path.samefile(found, tmp_path / "work" / "two.json")
    job = prepare_job(os.path.join("..", "out", "p.json"), MODEL, DeployOptions())
    assert os.path.samefile(job.topology_path, tmp_path / "work" / "two.json") and job.nproc == 2


def test_paths_recorded_as_given_by_older_plans_still_resolve(tmp_path, monkeypatch):
    (tmp_path / "plans").mkdir()
    (tmp_path / "topo.json").write_text(json.dumps(TOPO))
    monkeypatch.chdir(tmp_path)
    plan = os.path.join("plans", "old.json")
    assert resolve_recorded("topo.json", plan) == "topo.json"  # not beside the plan: from the working directory
    (tmp_path / "plans" / "topo.json").write_text(json.dumps(TOPO))
    assert resolve_recorded("topo.json", plan) == str(tmp_path / "plans" / "topo.json")  # beside the plan first
    assert resolve_recorded("missing.json", plan) is None

"""A plan written to a file records its model, topology and profile by absolute path, so it can be copied anywhere
on the machine and deployed from any directory; a plan moved together with its inputs finds them beside it; plans
that recorded paths as given still resolve from the working directory."""

from __future__ import annotations

import json
import os
import shutil

from tag.cli import main
from tag.deploy.job import DeployOptions, prepare_job, topology_path_of
from tag.strategy.planfile import recorded_path
from tag.strategy.planfile_read import resolve_recorded

MODEL = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "mlp.onnx"))
TOPO = {"version": 1, "name": "two", "machines": [
    {"name": "m0", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10}]}


def test_recorded_path_is_absolute_for_a_plan_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert recorded_path("t.json", "out/p.json") == str(tmp_path / "t.json")
    assert recorded_path("given/t.json", None) == "given/t.json"  # standard output: as given


def test_a_plan_copied_elsewhere_finds_its_topology_from_any_directory(tmp_path, monkeypatch):
    for d in ("work", "out", "elsewhere"):
        (tmp_path / d).mkdir()
    (tmp_path / "work" / "two.json").write_text(json.dumps(TOPO))
    monkeypatch.chdir(tmp_path / "work")
    assert main(["plan", MODEL, "two.json", "--baseline", "dp-even", "--batch-size", "8", "--optimizer", "momentum",
                 "-o", os.path.join("..", "out", "p.json")]) == 0
    raw = json.loads((tmp_path / "out" / "p.json").read_text())
    assert raw["topology"]["path"] == str(tmp_path / "work" / "two.json") and raw["model"]["path"] == MODEL
    shutil.copy(tmp_path / "out" / "p.json", tmp_path / "elsewhere" / "copy.json")
    monkeypatch.chdir(tmp_path / "elsewhere")  # neither the plan's directory nor the one it was made in
    for plan in (os.path.join("..", "out", "p.json"), "copy.json"):
        assert os.path.samefile(topology_path_of(plan, None), tmp_path / "work" / "two.json")
        job = prepare_job(plan, MODEL, DeployOptions())
        assert os.path.samefile(job.topology_path, tmp_path / "work" / "two.json") and job.nproc == 2


def test_older_plans_and_plans_moved_with_their_inputs_resolve(tmp_path, monkeypatch):
    (tmp_path / "plans").mkdir()
    (tmp_path / "topo.json").write_text(json.dumps(TOPO))
    monkeypatch.chdir(tmp_path)
    plan = os.path.join("plans", "old.json")
    assert resolve_recorded("topo.json", plan) == "topo.json"  # as given, from the working directory
    assert resolve_recorded("/gone/away/topo.json", plan) is None
    (tmp_path / "plans" / "topo.json").write_text(json.dumps(TOPO))  # the inputs moved along with the plan
    assert resolve_recorded("/gone/away/topo.json", plan) == str(tmp_path / "plans" / "topo.json")
    assert resolve_recorded("missing.json", plan) is None

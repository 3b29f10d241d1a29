"""What `tag deploy` predicts: the plan re-simulated for the ranks it runs (devices merged onto ranks), with the
plan's recorded profile (found, unchanged) or the reason it cannot; checked against hand-merged strategies and
against simulating a plan written for that many devices."""

import json
import os
import shutil

import pytest

from tag.cli import main
from tag.cli.deploy import predict_as_run
from tag.deploy.job import DeployOptions, plan_profile, prepare_job, ranks_strategy
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")


def test_ranks_strategy_merges_blocks_by_hand():
    s = Strategy((Decision((8, 8, 8, 8), sync="ring"),
                  Decision((0, 0, 16, 16), sync="ps", server=3),
                  Decision((0, 0, 0, 32)),
                  Decision((16, 0, 16, 0), sync="ps", server=2, zero=1)))
    m = ranks_strategy(s, 4, 2)  # ranks: devices {0, 1} -> 0 (on device 0), {2, 3} -> 1 (on device 2)
    assert [d.rows for d in m.decisions] == [(16, 0, 16, 0), (0, 0, 32, 0), (0, 0, 32, 0), (16, 0, 16, 0)]
    assert [(d.sync, d.server, d.zero) for d in m.decisions] == [("ring", None, 0), (None, None, 0),
                                                                  (None, None, 0), ("ps", 2, 1)]
    three = ranks_strategy(s, 4, 3)  # blocks {0, 1}, {2}, {3}
    assert three.decisions[0].rows == (16, 0, 8, 8) and three.decisions[1].server == 3
    assert ranks_strategy(s, 4, 4) is s


def test_ranks_strategy_moves_stage_devices():
    s = Strategy((Decision((16, 16, 0, 0), sync="ring"), Decision((0, 0, 16, 16), sync="ring")),
                 pipeline=Pipeline((Stage((0,), (0, 1)), Stage((1,), (2, 3))), 2, "1f1b"))
    m = ranks_strategy(s, 4, 2)
    assert [st.devices for st in m.pipeline.stages] == [(0,), (2,)]
    assert [d.rows for d in m.decisions] == [(32, 0, 0, 0), (0, 0, 32, 0)]
    assert all(d.sync is None for d in m.decisions)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """dp-even plans of mlp (batch 64) on cpu4 and on the same machine with 2 devices (roofline: no profile)."""
    d = tmp_path_factory.mktemp("pred")
    topo4 = d / "cpu4.json"
    shutil.copy(os.path.join(ROOT, "datasets", "topologies", "cpu4.json"), topo4)
    raw = json.loads(topo4.read_text())
    raw["machines"][0]["devices"][0]["count"] = 2
    topo2 = d / "cpu2.json"
    topo2.write_text(json.dumps(raw))
    out = {}
    for name, topo in (("p4", topo4), ("p2", topo2)):
        out[name] = d / f"{name}.json"
        assert main(["plan", MODEL, str(topo), "--baseline", "dp-even", "--batch-size", "64", "-o", str(out[name]),
                     "--json"]) == 0
    out["topo2"] = topo2
    return out


def test_four_device_plan_on_two_ranks_predicts_the_two_device_plan(plans, capsys):
    """Second method: the 2-device plan of the same machine simulated as deploy runs it (blocking exchanges,
    overlapped bucket sums) gives the same step as the 4-device plan merged onto 2 ranks."""
    from tag.modelio import ModelOptions, load_inputs
    from tag.sim import simulate

    capsys.readouterr()
    job = prepare_job(str(plans["p4"]), MODEL, DeployOptions(nproc=2))
    pred = predict_as_run(job)
    inp = load_inputs(MODEL, str(plans["topo2"]), ModelOptions(), plan_path=str(plans["p2"]))
    direct = simulate(inp.gg, inp.cluster, inp.cost, inp.strategy, inp.training, overlap_sync=True,
                      blocking_sends=True).iteration_ms
    assert pred.step_ms == pytest.approx(direct, rel=1e-9)
    assert pred.ranks == 2 and pred.cost_model == "roofline" and "roofline" in pred.note
    four = predict_as_run(prepare_job(str(plans["p4"]), MODEL, DeployOptions()))
    assert four.ranks == 4 and four.step_ms != pytest.approx(pred.step_ms)


def test_plan_profile_found_missing_or_changed(plans, tmp_path):
    raw = json.loads(plans["p2"].read_text())
    assert plan_profile(str(plans["p2"])) == (None, None)  # planned without a profile
    prof = tmp_path / "prof.json"
    prof.write_text(json.dumps({"version": 1, "device_type": "cpu"}))
    import hashlib

    raw["profile"] = {"path": "prof.json", "sha256": hashlib.sha256(prof.read_bytes()).hexdigest()}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(raw))
    assert plan_profile(str(plan)) == (os.path.join(str(tmp_path), "prof.json"), None)  # beside the plan
    prof.write_text(json.dumps({"version": 1, "device_type": "cpu", "threads": 1}))
    path, note = plan_profile(str(plan))
    assert path is None and "changed" in note and "prof.json" in note
    prof.unlink()
    path, note = plan_profile(str(plan))
    assert path is None and "missing" in note
    job = prepare_job(str(plan), MODEL, DeployOptions(topology_path=str(plans["topo2"])))
    pred = predict_as_run(job)
    assert pred.step_ms is None and "missing" in pred.note


def test_plan_records_its_profile(plans, tmp_path):
    import hashlib

    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"version": 1, "device_type": "cpu"}))
    out = tmp_path / "plan.json"
    assert main(["plan", MODEL, str(plans["topo2"]), "--baseline", "single-device", "--batch-size", "64",
                 "--profile", str(prof), "-o", str(out), "--json"]) == 0
    rec = json.loads(out.read_text())["profile"]
    assert rec == {"path": str(prof), "sha256": hashlib.sha256(prof.read_bytes()).hexdigest()}
    assert plan_profile(str(out)) == (str(prof), None)

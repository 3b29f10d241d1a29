"""`tag simulate --plan` and `tag report` take what the plan records when the flags are left out: the profile it
was made with (so they show the plan's own prediction, not the roofline's) and, for report, its topology. A
recorded profile that changed since is one warning line and the roofline model."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tag.cli import main

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
TOPO = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    d = tmp_path_factory.mktemp("recorded")
    prof, plan, plain = str(d / "prof.json"), str(d / "plan.json"), str(d / "plain.json")
    assert main(["profile", "ops", MODEL, "-o", prof, "--rows", "8,16", "--repeats", "1", "--warmup", "0",
                 "--quick"]) == 0
    for out, extra in ((plan, ["--profile", prof]), (plain, [])):
        assert main(["plan", MODEL, TOPO, "--baseline", "dp-even", "--batch-size", "32", "-o", out, *extra]) == 0
    return d, prof, plan, plain


def _json(capsys, argv) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_and_report_default_to_the_plans_profile(planned, capsys, tmp_path):
    d, prof, plan, plain = planned
    recorded = json.load(open(plan))["predicted"]["iteration_ms"]
    roofline = json.load(open(plain))["predicted"]["iteration_ms"]
    assert abs(recorded - roofline) > 1e-3  # the two cost models differ on this plan
    sim = _json(capsys, ["simulate", MODEL, TOPO, "--plan", plan, "--json"])
    assert sim["iteration_ms"] == pytest.approx(recorded, abs=1e-4)
    rep = _json(capsys, ["report", plan, MODEL, "-o", str(tmp_path / "r.html"), "--json"])  # topology from the plan
    assert rep["iteration_ms"] == pytest.approx(recorded, abs=1e-4) and rep["devices"] == 4
    assert _json(capsys, ["simulate", MODEL, TOPO, "--plan", plain, "--json"])["iteration_ms"] == pytest.approx(
        roofline, abs=1e-4)


def test_a_changed_profile_is_one_warning_and_the_roofline(planned, capsys, tmp_path):
    d, prof, plan, plain = planned
    moved = tmp_path / "plan.json"
    shutil.copy(plan, moved)
    changed = json.load(open(prof))
    changed["dispatch_ms"] = 1.0 + (changed.get("dispatch_ms") or 0.0)
    (tmp_path / "prof.json").write_text(json.dumps(changed))  # the recorded path resolves beside the plan
    rec = json.load(open(moved))
    rec["profile"]["path"] = "prof.json"
    moved.write_text(json.dumps(rec))
    capsys.readouterr()
    assert main(["simulate", MODEL, TOPO, "--plan", str(moved), "--json"]) == 0
    cap = capsys.readouterr()
    warnings = [ln for ln in cap.err.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "changed since the plan was made" in warnings[0] and "roofline" in warnings[0]
    roofline = json.load(open(plain))["predicted"]["iteration_ms"]
    assert json.loads(cap.out)["iteration_ms"] == pytest.approx(roofline, abs=1e-4)

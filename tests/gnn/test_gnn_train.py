"""Training plumbing: value targets by hand, resumable runs, bad flags as one-line input errors."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from tag.cli import main
from tag.gnn.targets import policy_target, speed_target
from tag.sim import SimResult

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MLP = os.path.join(ROOT, "datasets", "models", "mlp.onnx")


def _res(ms, oom=False):
    return SimResult(iteration_ms=math.inf if oom else ms, samples_per_s=0.0, oom=oom, oom_devices=[],
                     peak_memory_gb={}, busy_ms={}, link_bytes={})


def test_speed_target_is_the_clipped_log_of_scale_over_iteration():
    assert speed_target(_res(50.0), 100.0) == pytest.approx(math.log(2.0))
    assert speed_target(_res(200.0), 100.0) == pytest.approx(-math.log(2.0))
    assert speed_target(_res(1e6), 100.0) == -6.0
    assert speed_target(_res(1e-6), 100.0) == 1.0
    assert speed_target(_res(10.0, oom=True), 100.0) == -6.0


def test_policy_target_is_a_tempered_softmax():
    p = policy_target([0.0, 0.1, -1.5], 0.1)
    z = [math.exp(-1.0), 1.0, math.exp(-16.0)]
    assert p.tolist() == pytest.approx([x / sum(z) for x in z])
    assert policy_target([3.0, 3.0, 3.0, 3.0], 0.02).tolist() == pytest.approx([0.25] * 4)
    with pytest.raises(ValueError):
        policy_target([0.0], 0.0)


def test_resume_continues_the_run(tmp_path, capsys):
    topo_dir = tmp_path / "t"
    topo_dir.mkdir()
    (topo_dir / "two.json").write_text(json.dumps(
        {"version": 1, "machines": [{"name": "m0", "devices": [{"type": "T4-16GB", "count": 2}]}]}))
    out = str(tmp_path / "run.pt")
    common = ["train", "--models", MLP, "--topologies", str(topo_dir), "--playouts", "6", "--groups", "3", "-o", out, "--json"]
    assert main(common + ["--episodes", "1"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["episodes"] == 1
    w1 = torch.load(out, weights_only=True)
    assert main(common + ["--episodes", "2", "--resume"]) == 0
    second = json.loads(capsys.readouterr().out)
    w2 = torch.load(out, weights_only=True)
    assert second["episodes"] == 2 and second["steps"] == 2 * first["steps"]
    assert [h["episode"] for h in w2["progress"]["history"]] == [0, 1]
    assert w2["optimizer"]["state"] and any(not torch.equal(w1["model"][k], w2["model"][k]) for k in w1["model"])


@pytest.mark.parametrize("argv, where", [
    (["--topologies", "random:0"], "random:N"),
    (["--topologies", "random:2", "--minutes", "-1"], "--minutes"),
    (["--topologies", "random:2", "--init", "/nonexistent.pt"], "/nonexistent.pt"),
])
def test_bad_flags_exit_2_with_one_line(argv, where, tmp_path, capsys):
    rc = main(["train", "--models", MLP, "-o", str(tmp_path / "x.pt")] + argv)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and where in err


def test_visit_count_targets_still_train(tmp_path, capsys):
    topo = tmp_path / "two.json"
    topo.write_text(json.dumps({"version": 1, "machines": [{"name": "m0", "devices": [{"type": "T4-16GB", "count": 2}]}]}))
    out = str(tmp_path / "v.pt")
    assert main(["train", "--models", MLP, "--topologies", str(topo), "--targets", "visits", "--playouts", "12",
                 "--groups", "3", "--episodes", "1", "-o", out, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    card = json.load(open(out + ".card.json"))
    assert metrics["episodes"] == 1 and metrics["steps"] > 0
    assert card["data"]["targets"] == "visits" and card["data"]["playouts_per_episode"] == 12

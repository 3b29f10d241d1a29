"""`tag deploy`'s speed check (`tag.profile.speed_check`): the profile's reference step re-timed now, compared with
the step block's figures read from the profile file by hand; when it declines; and what deploy does with it."""

from __future__ import annotations

import json
import os

import pytest

from tag.cli import main
from tag.profile import speed_check as sc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """mlp profiled at rows 4 and 8 with its step block and no contention probe, and a dp-even plan using it."""
    d = tmp_path_factory.mktemp("speed")
    prof = d / "prof.json"
    assert main(["profile", "ops", MODEL, "--rows", "4,8", "--repeats", "1", "--warmup", "0", "--quick",
                 "--ranks", "0", "-o", str(prof), "--json"]) == 0
    topo = d / "cpu2.json"
    raw = json.loads(open(os.path.join(ROOT, "datasets", "topologies", "cpu4.json")).read())
    raw["machines"][0]["devices"][0]["count"] = 2
    topo.write_text(json.dumps(raw))
    plan = d / "plan.json"
    assert main(["plan", MODEL, str(topo), "--baseline", "dp-even", "--batch-size", "16", "--profile", str(prof),
                 "-o", str(plan), "--json"]) == 0
    return d, prof, plan


def _then_by_hand(raw: dict, rows: int) -> float:
    st = raw["step"]
    i = st["rows"].index(rows)
    return sum(g["fwd_ms"][i] + g["bwd_ms"][i] for g in st["groups"]) + st["update_ms"][i] + st["other_ms"][i]


def test_check_times_the_step_block_row_count_and_reads_its_figure(profiled):
    _, prof, _ = profiled
    raw = json.loads(prof.read_text())
    assert raw.get("contention") is None and raw["step"]["rows"] == [4, 8]
    check = sc.speed_check(MODEL, str(prof))
    assert check.rows == 8  # no contention probe: the block's largest row count
    assert check.then_ms == pytest.approx(_then_by_hand(raw, 8), rel=1e-12)
    assert check.now_ms > 0 and check.factor == pytest.approx((check.now_ms / check.then_ms) ** 0.5)


def test_reference_rows_prefers_the_contention_probes():
    from types import SimpleNamespace as N

    assert sc.reference_rows(N(rows=[4, 8, 16]), 8) == 8
    assert sc.reference_rows(N(rows=[4, 8, 16]), 32) == 16
    assert sc.reference_rows(N(rows=[4, 8, 16]), None) == 16


@pytest.mark.parametrize("change", ["wall clock", "other grouping", "no step block"])
def test_check_declines_what_it_cannot_compare(profiled, tmp_path, change):
    _, prof, _ = profiled
    raw = json.loads(prof.read_text())
    if change == "wall clock":
        raw["settings"]["clock"] = "wall"
    elif change == "other grouping":
        raw["step"]["groups"][0]["ops"] = ["not_an_op"]
    else:
        raw.pop("step")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    assert sc.speed_check(MODEL, str(path)) is None


def test_deploy_scales_its_prediction_by_the_factor(profiled, monkeypatch, capsys):
    """With the reference step timed at four times the profile's figure, deploy's prediction is `predict_as_run`
    with speed sqrt(4) = 2; with --no-speed-check it is speed 1 (the run itself is faked: only the prediction is
    checked)."""
    from tag.cli.deploy import predict_as_run
    from tag.deploy import launcher
    from tag.deploy.job import DeployOptions, prepare_job

    d, prof, plan = profiled
    then = _then_by_hand(json.loads(prof.read_text()), 8)
    monkeypatch.setattr(sc, "time_step_ms", lambda rt, *a, **k: 4.0 * then)
    monkeypatch.setattr(launcher, "launch", lambda job, on_step=None: launcher.DeployResult(
        [1.0] * job.steps, [5.0] * job.steps, 5.0, "gloo", job.nproc))
    job = prepare_job(str(plan), MODEL, DeployOptions(steps=2, nproc=2))
    want = {s: predict_as_run(job, speed=s).step_ms for s in (1.0, 2.0)}
    assert want[2.0] > want[1.0]
    for flags, speed in (([], 2.0), (["--no-speed-check"], 1.0)):
        assert main(["deploy", str(plan), MODEL, "--steps", "2", "--nproc", "2", "--json", *flags]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["predicted_step_ms"] == pytest.approx(want[speed], rel=1e-9)
        check = out["prediction"]["speed_check"]
        assert (check is None) == bool(flags)
        if check:
            assert check["factor"] == pytest.approx(2.0) and check["rows"] == 8


def test_check_rebuilds_groups_coarsened_at_the_profiles_batch(tmp_path):
    """resnet_tiny's grouping depends on the batch it is coarsened at: profiled at --batch-size 32 with rows 16 (as
    benchmarks/buckets_deploy.py does), the check still finds the step block's groups and reads its figure."""
    model = os.path.join(ROOT, "datasets", "models", "resnet_tiny.onnx")
    prof = tmp_path / "prof.json"
    assert main(["profile", "ops", model, "--batch-size", "32", "--rows", "16", "--repeats", "1", "--warmup", "0",
                 "--quick", "--ranks", "0", "-o", str(prof), "--json"]) == 0
    raw = json.loads(prof.read_text())
    for batch in (32, None):
        check = sc.speed_check(model, str(prof), batch)
        assert check is not None and check.rows == 16
        assert check.then_ms == pytest.approx(_then_by_hand(raw, 16), rel=1e-12)

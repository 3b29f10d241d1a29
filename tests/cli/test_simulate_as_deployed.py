"""`tag simulate --profile P` with a contention block also prints the step as `tag deploy` runs it (docs/profile.md
§ contention): the plan's compute times x (alone + f (together - alone)) x (1 + f (together_speed - 1)), f = (c - 1)
/ (n - 1), c the simulated concurrency of n ranks; checked by hand."""

import json
import os

import pytest

from tag.cli import main

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
TOPO = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")
TERMS = {"clock": "thread", "ranks": 2, "rows": 8, "handoff_ms": 0.1, "alone_stretch": 1.5, "together_stretch": 2.0,
         "together_speed": 1.2}


def _simulate(capsys, tmp_path, baseline, contention):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"version": 1, "device_type": "cpu", **({"contention": contention} if contention else {})}))
    capsys.readouterr()
    assert main(["simulate", MODEL, TOPO, "--baseline", baseline, "--profile", str(prof), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_one_device_computes_alone(capsys, tmp_path):
    """single-device: one rank computes and the others wait (c = 1, f = 0): every time x alone_stretch = 1.5, and
    there is no message for the handoff to delay."""
    out = _simulate(capsys, tmp_path, "single-device", TERMS)
    run = out["as_deployed"]
    assert run["concurrency"] == pytest.approx(1.0) and run["compute_scale"] == pytest.approx(1.5)
    assert run["step_ms"] == pytest.approx(1.5 * out["iteration_ms"], rel=1e-9)
    assert run["ranks"] == 4 and run["without"] == ["measured barrier"]


def test_data_parallel_scale_follows_its_concurrency(capsys, tmp_path):
    """dp-even on 4 ranks: the scale is the formula at the reported concurrency (> 1.5, so the step is slower than
    the plain iteration: compute slower, messages no faster)."""
    out = _simulate(capsys, tmp_path, "dp-even", TERMS)
    run = out["as_deployed"]
    f = (run["concurrency"] - 1) / (4 - 1)
    assert 1 < run["concurrency"] <= 4
    assert run["compute_scale"] == pytest.approx((1.5 + f * 0.5) * (1 + f * 0.2), rel=1e-12)
    assert run["compute_scale"] > 1.5 and run["step_ms"] > out["iteration_ms"]


def test_no_contention_block_no_as_deployed(capsys, tmp_path):
    assert "as_deployed" not in _simulate(capsys, tmp_path, "dp-even", None)

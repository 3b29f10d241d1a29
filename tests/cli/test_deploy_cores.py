"""`tag deploy` warns when its CPU ranks x threads outnumber the cores, after validating its inputs."""

from __future__ import annotations

import json
import os

import pytest

import tag.cli.deploy as deploy_cli
from tag.cli import main

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
TOPO = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")


def test_cores_warning_counts_ranks_times_threads():
    assert deploy_cli.cores_warning(2, 1, 2) is None
    assert deploy_cli.cores_warning(1, 2, 2) is None
    w = deploy_cli.cores_warning(4, 1, 2)
    assert w.startswith("4 ranks x 1 thread need 4 cores, this machine has 2") and "--nproc 2 or fewer" in w
    w = deploy_cli.cores_warning(2, 2, 3)  # 4 > 3 cores; 3 // 2 = one rank of 2 threads fits
    assert "need 4 cores" in w and "--nproc 1 or fewer" in w


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("cores") / "dp.json"
    assert main(["plan", MODEL, TOPO, "--baseline", "dp-even", "--batch-size", "16", "-o", str(path), "--json"]) == 0
    return str(path)


@pytest.fixture
def one_core(monkeypatch):
    monkeypatch.setattr(deploy_cli, "available_cores", lambda: 1)
    monkeypatch.setattr(deploy_cli, "_has_gpu", lambda: False)


def test_bad_input_prints_only_its_error_line(plan, one_core, capsys):
    assert main(["deploy", plan, MODEL, "--steps", "2", "--lr", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "warning" not in err[0]


def test_oversubscribed_run_warns_once_before_launching(plan, one_core, capsys, monkeypatch):
    import tag.deploy.launcher as launcher

    def fail(job, on_step=None):
        raise launcher.DeployFailed("stopped by the test")

    monkeypatch.setattr(launcher, "launch", fail)
    assert main(["deploy", plan, MODEL, "--steps", "2", "--nproc", "2"]) == 1
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "2 ranks x 1 thread need 2 cores, this machine has 1" in warnings[0]


def test_print_launch_does_not_warn(plan, one_core, capsys):
    assert main(["deploy", plan, MODEL, "--print-launch"]) == 0
    assert "warning" not in capsys.readouterr().err

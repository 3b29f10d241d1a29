"""`prepare_job` with typed `DeployOptions`: defaults, the rank count's bounds, the optimizer override, a batch
that contradicts the plan. No ranks are started."""

from __future__ import annotations

import json
import os

import pytest

from tag.cli import main
from tag.deploy.job import DeployOptions, prepare_job
from tag.errors import InputError
from tag.modelio import ModelOptions

MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "mlp.onnx")
TOPO = {"version": 1, "name": "three", "machines": [
    {"name": "m0", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10},
    {"name": "m1", "devices": [{"type": "cpu", "count": 1}], "nic_bandwidth_gbps": 10}]}  # 3 devices
B = 12


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    d = tmp_path_factory.mktemp("job_options")
    topo = d / "three.json"
    topo.write_text(json.dumps(TOPO))
    path = d / "dp.json"
    assert main(["plan", MODEL, str(topo), "--baseline", "dp-even", "--batch-size", str(B), "--optimizer",
                 "momentum", "-o", str(path)]) == 0
    return str(path), str(topo)


def test_defaults_one_rank_per_device_and_the_plans_training(plan):
    path, topo = plan
    stages: list[str] = []
    job = prepare_job(path, MODEL, DeployOptions(), on_step=stages.append)
    assert job.topology_path == topo  # the plan's topology.path
    assert (job.nproc, job.steps, job.seed, job.threads, job.warmup, job.timeout_s) == (3, 5, 0, 1, 1, 300.0)
    assert job.batch_size == B and job.training.optimizer == "momentum"
    assert job.device_ids == ["m0/0", "m0/1", "m1/0"] and job.device_machines == ["m0", "m0", "m1"]
    assert stages == ["topology", "model", "plan check", "cost model"]


def test_settings_and_optimizer_override_reach_the_job(plan):
    path, _ = plan
    job = prepare_job(path, MODEL, DeployOptions(steps=2, nproc=2, seed=7, threads=2, warmup=0, timeout_s=12.5,
                                                 optimizer="sgd"))
    assert (job.nproc, job.steps, job.seed, job.threads, job.warmup, job.timeout_s) == (2, 2, 7, 2, 0, 12.5)
    assert job.training.optimizer == "sgd"


@pytest.mark.parametrize("nproc", [0, -1, 4])
def test_rank_count_outside_one_to_the_plans_devices_is_refused(plan, nproc):
    path, _ = plan
    with pytest.raises(InputError, match=r"--nproc.*1\.\.3"):
        prepare_job(path, MODEL, DeployOptions(nproc=nproc))


def test_batch_that_contradicts_the_plan_names_the_plan_field(plan):
    path, _ = plan
    with pytest.raises(InputError, match="model.batch_size"):
        prepare_job(path, MODEL, DeployOptions(model=ModelOptions(batch_size=B + 1)))
    with pytest.raises(InputError, match="--steps"):
        prepare_job(path, MODEL, DeployOptions(steps=0))


REGRESSION = '''
import numpy as np

def rows40():
    x = np.zeros((40, 512), dtype=np.float32)
    return x, x.copy()
'''


def test_user_training_steps_epochs_lr_and_the_launch_flags(plan, tmp_path, monkeypatch):
    from tag.deploy.launcher import launch_commands

    path, _ = plan
    (tmp_path / "reg.py").write_text(REGRESSION)
    spec = str(tmp_path / "reg.py") + ":rows40"
    # 40 rows at a global batch of 12: 3 steps per epoch (rows 36-39 of every epoch dropped)
    for opts, steps in ((DeployOptions(data=spec), 3), (DeployOptions(data=spec, epochs=4), 12),
                        (DeployOptions(data=spec, steps=7), 7), (DeployOptions(), 5)):
        job = prepare_job(path, MODEL, opts)
        assert job.steps == steps and job.start_step == 0
    job = prepare_job(path, MODEL, DeployOptions(data=spec, epochs=2, lr=0.05, loss="mse"))
    assert (job.training.lr, job.loss, job.data.spec, job.data.order.steps_per_epoch) == (0.05, "mse", spec, 3)
    assert job.training.lr != prepare_job(path, MODEL, DeployOptions()).training.lr  # the plan's 0.001 otherwise
    for _, cmd in launch_commands(job):
        assert f"--data {spec}" in cmd and "--lr 0.05" in cmd and "--steps 6" in cmd and "--loss mse" in cmd
    # each machine's worker rebuilds the same job from those flags
    import shlex

    from tag.deploy.job import load_job
    from tag.deploy.worker import job_from_flags

    argv = shlex.split(launch_commands(job)[0][1])
    argv = argv[argv.index("tag.deploy.worker") + 1:] + ["--run-dir", str(tmp_path / "run")]
    monkeypatch.setenv("WORLD_SIZE", "3")
    again = load_job(job_from_flags(argv))
    assert (again.steps, again.training.lr, again.loss, again.data.spec) == (6, 0.05, "mse", spec)

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

"""The app layer turns flags into typed options (`tag.cli.inputs`); the loader reports its stages."""

from __future__ import annotations

import os

from tag.cli import build_parser
from tag.cli.inputs import deploy_options, model_options
from tag.deploy.job import DeployOptions
from tag.modelio import LOAD_STAGES, ModelOptions, load_inputs

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MLP = os.path.join(ROOT, "datasets", "models", "mlp.onnx")  # one input x: [batch, 512]
CPU4 = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")


def test_plan_flags_become_model_options():
    args = build_parser().parse_args(["plan", MLP, CPU4, "--batch-size", "8", "--input-shape", "x=8X512",
                                      "--data-input", "x", "--groups", "3", "--optimizer", "sgd",
                                      "--profile", "p.json"])
    assert model_options(args) == ModelOptions(batch_size=8, input_shapes={"x": (8, 512)}, data_inputs=("x",),
                                               optimizer="sgd", profile="p.json", groups=3)


def test_plan_defaults_are_the_documented_ones():
    opts = model_options(build_parser().parse_args(["plan", MLP, CPU4]))
    assert opts == ModelOptions(optimizer="adam")  # --optimizer defaults to adam; everything else: from the file
    assert opts.training().optimizer == "adam" and ModelOptions().training().optimizer == "adam"


def test_deploy_flags_become_deploy_options():
    args = build_parser().parse_args(["deploy", "plan.json", MLP, "--topology", "t.json", "--steps", "7",
                                      "--nproc", "3", "--seed", "4", "--threads", "2", "--warmup", "0",
                                      "--timeout", "9.5", "--batch-size", "12"])
    assert deploy_options(args) == DeployOptions(topology_path="t.json", steps=7, nproc=3, seed=4, threads=2,
                                                 warmup=0, timeout_s=9.5, optimizer=None,
                                                 model=ModelOptions(batch_size=12))


def test_load_inputs_reports_each_stage_once():
    seen: list[str] = []
    inp = load_inputs(MLP, CPU4, ModelOptions(batch_size=8, groups=2), on_step=seen.append)
    assert seen == ["topology", "model", "groups", "cost model"] and len(seen) == LOAD_STAGES
    assert inp.batch_size == 8 and inp.gg.n_groups == 2 and inp.cluster.n_devices == 4

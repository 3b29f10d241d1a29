"""Pipelined plans on 3 gloo ranks train exactly like one process on the whole batch (losses and parameters).

One spawn of 3 ranks runs every case in turn: the hand-written toy model (a tied weight and an unbatched tensor sent
between stages), gpt2_tiny (tied embedding and head, so one parameter syncs across the first and last stage) and
bert_tiny (skip edges from group 0 into every later group), each with m = 4 micro-batches under gpipe, 1f1b and
kfkb (k = 2), as a 2-stage pipeline whose first or second stage has two uneven replicas (3:1 rows of every
micro-batch) and as a 3-stage pipeline of one device per stage. The reference is plain full-batch training with
torch.optim (`_deploy_harness.reference_training`), written independently of the runtime.

A second launch runs `tag deploy` on a pipelined plan.json end to end (the digits MLP on its own data, ranks hosting
several devices, uneven replicas), against plain torch.
"""

from __future__ import annotations

import os

import pytest
import torch

from tag.deploy.data import synthetic_batch
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage
from _deploy_harness import assert_ranks_match_reference, digits_reference, reference_training, run_scenarios
from _deploy_toy import TOY_GROUPS, ToyProgram, toy_graph

B = 16  # global batch: 4 micro-batches of 4 rows; two replicas split a micro-batch 3:1
M = 4
MACHINES = ["m0", "m0", "m1"]
MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models")
SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("kfkb", 2))


def D(rows, sync=None):
    return Decision(tuple(rows), sync)


def two_stage(schedule: str, k: int, replicas_first: bool) -> Strategy:
    """Groups 0-1 on stage 0, 2-3 on stage 1; the replicated stage splits each micro-batch 3:1 (ring sync)."""
    if replicas_first:
        decs = [D((12, 4, 0), "ring")] * 2 + [D((0, 0, 16))] * 2
        stages = (Stage((0, 1), (0, 1)), Stage((2, 3), (2,)))
    else:
        decs = [D((16, 0, 0))] * 2 + [D((0, 12, 4), "tree")] * 2
        stages = (Stage((0, 1), (0,)), Stage((2, 3), (1, 2)))
    return Strategy(tuple(decs), pipeline=Pipeline(stages, M, schedule, k))


def three_stage(schedule: str, k: int) -> Strategy:
    """Group 0 on device 0, groups 1-2 on device 1, group 3 on device 2."""
    decs = [D((16, 0, 0)), D((0, 16, 0)), D((0, 16, 0)), D((0, 0, 16))]
    stages = (Stage((0,), (0,)), Stage((1, 2), (1,)), Stage((3,), (2,)))
    return Strategy(tuple(decs), pipeline=Pipeline(stages, M, schedule, k))


def make(sc):
    """(graph, program, groups) of a scenario's model, parameters seeded 0."""
    if sc["model"] == "toy":
        graph = toy_graph(B)
        return graph, ToyProgram(graph, seed=0), TOY_GROUPS
    import onnx

    from tag.deploy.onnx_torch import TorchProgram
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    path = os.path.join(MODELS, f"{sc['model']}.onnx")
    graph = load_model(path, batch_size=B)
    groups = [list(g.op_ids) for g in coarsen(graph, k=4, n_devices=3).groups]
    assert len(groups) == 4
    return graph, TorchProgram(onnx.load(path), graph, seed=0), groups


def _scenarios():
    out = []
    for model in ("toy", "gpt2_tiny", "bert_tiny"):
        # not Adam on the real models: exactly-zero gradients (the attention key bias) make Adam amplify round-off
        opt, lr = ("adam", 0.01) if model == "toy" else ("momentum", 0.01)
        for schedule, k in SCHEDULES:
            plans = {"2stage": two_stage(schedule, k, replicas_first=schedule != "1f1b"),
                     "3stage": three_stage(schedule, k)}
            for layout, strategy in plans.items():
                out.append({"name": f"{model}-{layout}-{schedule}", "model": model, "strategy": strategy,
                            "machines": MACHINES, "steps": 3, "optimizer": opt, "lr": lr})
    return out


def _reference(model, opt, lr, steps):
    graph, program, _ = make({"model": model})
    data, targets = synthetic_batch(graph, B, 0)
    return reference_training(graph, program, data, targets, steps, opt, lr)


def test_pipelines_on_three_ranks_equal_one_device(tmp_path):
    scenarios = _scenarios()
    results = run_scenarios(3, scenarios, make, str(tmp_path))
    refs = {}
    for sc in scenarios:
        key = (sc["model"], sc["optimizer"], sc["lr"], sc["steps"])
        if key not in refs:
            refs[key] = _reference(*key)
        ref_losses, ref_params = refs[key]
        ranks = results[sc["name"]]
        for r in ranks:
            assert len(r["step_ms"]) == sc["steps"] and all(t > 0 for t in r["step_ms"]), sc["name"]
        assert_ranks_match_reference(ranks, ref_losses, ref_params, sc["name"])  # every parameter held by a rank
        assert ref_losses[-1] < ref_losses[0], sc["name"]  # training moved the loss


# ---- tag deploy on a pipelined plan.json ------------------------------------------------------------------------
TOPO = {"version": 1, "name": "cpu4", "machines": [
    {"name": "m0", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10},
    {"name": "m1", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10}]}
DIGITS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "digits")
DIGITS_B, DIGITS_STEPS, DIGITS_LR = 64, 4, 0.01


def _pipelined_plan_file(tmp_path, model, stage_rows, stage_devices, name):
    """`model`'s groups cut in two halves (the first n // 2 on stage 0) on a 4-cpu cluster, written by the plan
    writer (buckets derived); Adam, cross entropy."""
    import json

    from tag.cli import main
    from tag.modelio import ModelOptions, load_inputs
    from tag.strategy import TrainingConfig
    from tag.strategy.planfile import write_plan

    topo = tmp_path / "cpu4.json"
    topo.write_text(json.dumps(TOPO))
    dp = tmp_path / "dp.json"
    if not dp.exists():
        assert main(["plan", model, str(topo), "--baseline", "dp-even", "--batch-size", str(DIGITS_B), "-o", str(dp),
                     "--json"]) == 0
    inp = load_inputs(model, str(topo), ModelOptions(batch_size=DIGITS_B), plan_path=str(dp))
    n = inp.gg.n_groups
    cut = n // 2
    decs = []
    for g, dec in enumerate(inp.strategy.decisions):
        s = 0 if g < cut else 1
        replicated = sum(r > 0 for r in stage_rows[s]) > 1
        decs.append(Decision(stage_rows[s], ("ring", "tree")[s] if replicated and dec.sync is not None else None))
    stages = (Stage(tuple(range(cut)), stage_devices[0]), Stage(tuple(range(cut, n)), stage_devices[1]))
    strategy = Strategy(tuple(decs), 25.0, pipeline=Pipeline(stages, M, "1f1b"))
    path = tmp_path / name
    write_plan(str(path), strategy, inp.gg, inp.cluster, TrainingConfig("adam", DIGITS_LR, "cross_entropy"), model,
               str(topo))
    return path


def test_tag_deploy_runs_a_pipelined_plan(tmp_path, capsys):
    """The digits MLP on its own data: 4 plan devices on 3 ranks, rank 0 hosting both devices of stage 0 (rows 48 + 16
    of 64), ranks 1 and 2 stage 1's replicas with 16:48 rows (1:3 of each micro-batch; each reads its rows of every
    micro-batch), 1f1b, m = 4: losses and the exported weights equal one process's. With 2 ranks a plan whose first
    stage is one device is refused (rank 0 would host devices of both stages): exit 2, one line."""
    import json
    import subprocess
    import sys

    pytest.importorskip("sklearn")
    sys.path.insert(0, DIGITS)
    from make_model import export

    from tag.cli import main

    model, weights = str(tmp_path / "digits_mlp.onnx"), tmp_path / "w.pt"
    export(model, 0)
    plan = _pipelined_plan_file(tmp_path, model, ((48, 16, 0, 0), (0, 0, 16, 48)), ((0, 1), (2, 3)), "pipe.json")
    p = subprocess.run([sys.executable, "-m", "tag.cli", "deploy", str(plan), model, "--steps", str(DIGITS_STEPS),
                        "--nproc", "3", "--data", os.path.join(DIGITS, "digits.py") + ":train_set",
                        "--export", str(weights), "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["nproc"] == 3 and out["devices"] == 4 and out["batch_size"] == DIGITS_B
    assert out["loss"] == "cross_entropy" and out["optimizer"] == "adam"
    assert out["measured_step_ms"] > 0 and len(out["step_ms"]) == DIGITS_STEPS
    ref_losses, ref_state = digits_reference(DIGITS_STEPS, DIGITS_B, DIGITS_LR)
    assert out["losses"] == pytest.approx(ref_losses, rel=1e-4)
    trained = torch.load(weights, weights_only=True)
    assert set(trained) == set(ref_state)
    for name, v in ref_state.items():
        torch.testing.assert_close(trained[name], v, rtol=1e-4, atol=1e-6, msg=name)

    bad = _pipelined_plan_file(tmp_path, model, ((64, 0, 0, 0), (0, 16, 16, 32)), ((0,), (1, 2, 3)), "bad.json")
    capsys.readouterr()
    assert main(["deploy", str(bad), model, "--nproc", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert ("--nproc: 2: expected a rank count whose ranks each host devices of one pipeline stage (here: 4), found "
            "rank 0 would host devices of stages[0] and stages[1]") in err

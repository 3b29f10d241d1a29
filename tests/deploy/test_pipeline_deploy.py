"""Pipelined plans on 3 gloo ranks train exactly like one process on the whole batch (losses and parameters).

One spawn of 3 ranks runs every case in turn: the hand-written toy model (a tied weight and an unbatched tensor sent
between stages), gpt2_tiny (tied embedding and head, so one parameter syncs across the first and last stage) and
bert_tiny (skip edges from group 0 into every later group), each with m = 4 micro-batches under gpipe, 1f1b and
kfkb (k = 2), as a 2-stage pipeline whose first or second stage has two uneven replicas (3:1 rows of every
micro-batch) and as a 3-stage pipeline of one device per stage. The reference is plain full-batch training with
torch.optim (`_deploy_harness.reference_training`), written independently of the runtime.
"""

from __future__ import annotations

import os

import pytest
import torch

from tag.deploy.data import synthetic_batch
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage
from _deploy_harness import reference_training, run_scenarios
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
        seen = set()
        for r in ranks:
            assert r["losses"] == pytest.approx(ref_losses, rel=1e-4), sc["name"]
            assert len(r["step_ms"]) == sc["steps"] and all(t > 0 for t in r["step_ms"]), sc["name"]
            for n, v in r["params"].items():
                seen.add(n)
                torch.testing.assert_close(v, ref_params[n], rtol=1e-4, atol=1e-6, msg=f"{sc['name']}: {n}")
        assert seen == set(ref_params), sc["name"]  # every parameter is held (and checked) by some rank
        assert ref_losses[-1] < ref_losses[0], sc["name"]  # training moved the loss

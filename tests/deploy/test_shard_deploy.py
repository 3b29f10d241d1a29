"""Tensor-sharded groups (issue 22, must-show 2) train exactly like one device: losses and every parameter at rtol
1e-4 against plain single-process torch.optim training (`_deploy_harness.reference_training`, written independently
of the runtime). One spawn per rank count runs every case of that count in turn:

- 2 ranks: a 2-layer MLP (Linear 16-24, ReLU, Linear 24-8) with the hidden units split 1:2 (8 and 16), as one group
  (split heads: the Megatron pair, one all-reduce) and as two groups, column then row (the split activation handed
  over without any exchange); a tiny GPT (6 heads of 4, MLP 96) with its attention block and its MLP block split by
  heads 2:4 (hidden units 32:64), the embeddings data-parallel 5:7 rows and the head on one rank, and again with
  the head split by columns 1:1 (its split logits all-gathered for the loss);
- 3 ranks: the GPT's two blocks sharded 2:4 on ranks 1 and 2 while the embeddings and the head run data-parallel
  rows on all three (4:4:4 and 3:5:4);
- 4 ranks: two replicas of a 2-rank shard grid (7 and 5 rows; positions in the order [1, 0] and [3, 2], so the
  3-head slice sits on the lower rank), weight gradients summed over each position's peers; the MLP pair likewise,
  resumed from a checkpoint; a row-split Gemm on replicas [0, 3] and [1, 2] (5 and 7 rows) after data-parallel
  rows 3:3:3:3, so position 1's ranks take their rows in the other order than their rank order (rank 3 rows 0-4).
"""

from __future__ import annotations


import pytest
import torch

from tag.deploy.data import synthetic_batch
from tag.strategy import Decision, Strategy
from tag.strategy.shard import Shard
from _deploy_harness import assert_scenario_matches_reference, reference_training, run_scenarios

B = 12
ONE_TWO = (1 / 3, 2 / 3)
MLP_GROUPS = {"one": [[0, 1, 2]], "two": [[0, 1], [2]]}
GPT_GROUPS = [[0, 1], list(range(2, 25)), list(range(25, 32)), [32, 33, 34]]  # embeddings, attention, MLP, head


def D(rows, sync=None, shard=None, recompute=False):
    return Decision(tuple(rows), sync, shard=shard, recompute=recompute)


def heads(replicas, ratios=ONE_TWO, split="heads"):
    return Shard(split, tuple(tuple(r) for r in replicas), tuple(ratios))


def _plans() -> list[tuple[int, str, str, str, Strategy]]:
    """(world, name, model, groups key, strategy)."""
    pair = heads([[0, 1]])
    out = [(2, "mlp-pair-one-group", "mlp2", "one", Strategy((D((12, 12), shard=pair),))),
           (2, "mlp-column-then-row", "mlp2", "two",
            Strategy((D((12, 12), shard=heads([[0, 1]], split="column")), D((12, 12), shard=heads([[0, 1]], split="row"))))),
           (2, "gpt-heads-2-4", "gpt", "", Strategy((D((5, 7), "ring"), D((12, 12), shard=pair), D((12, 12), shard=pair),
                                                     D((12, 0))))),
           (2, "gpt-heads-column-head", "gpt", "", Strategy((D((12, 0)), D((12, 12), shard=pair),
                                                            D((12, 12), shard=pair),
                                                            D((12, 12), shard=heads([[1, 0]], (0.5, 0.5), "column"))))),
           (3, "gpt-shard-plus-rows", "gpt", "", Strategy((D((4, 4, 4), "ring"), D((0, 12, 12), shard=heads([[1, 2]])),
                                                          D((0, 12, 12), shard=heads([[1, 2]])),
                                                          D((3, 5, 4), "ring")))),
           (4, "gpt-two-replicas", "gpt", "", Strategy((D((3, 3, 3, 3), "ring"),
                                                       D((7, 7, 5, 5), "ring", heads([[1, 0], [3, 2]])),
                                                       D((7, 7, 5, 5), "tree", heads([[1, 0], [3, 2]])),
                                                       D((6, 0, 6, 0), "ring")))),
           (2, "gpt-heads-recompute", "gpt", "", Strategy((D((5, 7), "ring", recompute=True),
                                                           D((12, 12), shard=pair, recompute=True),
                                                           D((12, 12), shard=pair, recompute=True), D((0, 12))))),
           (2, "mlp-column-then-row-resume", "mlp2", "two",
            Strategy((D((12, 12), shard=heads([[1, 0]], split="column")),
                      D((12, 12), shard=heads([[1, 0]], split="row"))))),
           (2, "gpt-heads-2-4-bf16", "gpt", "", Strategy((D((5, 7), "ring"), D((12, 12), shard=pair),
                                                          D((12, 12), shard=pair), D((12, 0))))),
           (4, "mlp-crossed-replicas", "mlp2", "two",  # position 1's ranks (3, 2) in the other order than (0, 1)
            Strategy((D((3, 3, 3, 3), "ring"), D((5, 7, 7, 5), "ring", heads([[0, 3], [1, 2]], split="row"))))),
           (4, "mlp-two-replicas-resume", "mlp2", "two",
            Strategy((D((4, 4, 8, 8), "ring", heads([[0, 1], [2, 3]], split="column")),
                      D((4, 4, 8, 8), "ring", heads([[0, 1], [2, 3]], split="row")))))]
    return out


def make(sc):
    """(graph, program, groups) of a scenario's model, parameters seeded 0."""
    import onnx

    from tag.deploy.onnx_torch import TorchProgram
    from tag.graph import load_model

    graph = load_model(sc["path"], batch_size=B)
    groups = GPT_GROUPS if sc["model"] == "gpt" else MLP_GROUPS[sc["groups"]]
    return graph, TorchProgram(onnx.load(sc["path"]), graph, seed=0), groups


OPT = {"mlp2": ("adam", 0.01), "gpt": ("momentum", 0.01)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from _shard_models import mlp2, tiny_gpt

    d = tmp_path_factory.mktemp("shard_models")
    return {"mlp2": mlp2(str(d / "mlp2.onnx"), B), "gpt": tiny_gpt(str(d / "gpt.onnx"), B)}


def _scenarios(models, world):
    out = []
    for w, name, model, gk, s in _plans():
        if w != world:
            continue
        sc = {"name": name, "model": model, "path": models[model], "groups": gk, "strategy": s,
              "machines": ["m0"] * world, "steps": 3, "optimizer": OPT[model][0], "lr": OPT[model][1]}
        if name.endswith("-resume"):
            sc["resume_at"] = 2 if world == 2 else 1
        if name.endswith("-bf16"):
            sc["precision"] = "bf16"
        out.append(sc)
    return out


@pytest.mark.parametrize("world", [2, 3, 4])
def test_sharded_plans_train_like_one_device(models, world, tmp_path):
    scenarios = _scenarios(models, world)
    results = run_scenarios(world, scenarios, make, str(tmp_path))
    for sc in scenarios:
        ranks = results[sc["name"]]
        if "precision" in sc:  # bf16: the same curve within 2%, not the same numbers
            graph, program, _ = make(sc)
            data, targets = synthetic_batch(graph, B, 0)
            ref_losses, _ = reference_training(graph, program, data, targets, 3, sc["optimizer"], sc["lr"])
            for r in ranks:
                assert r["losses"] == pytest.approx(ref_losses, rel=0.02) and r["losses"] != ref_losses, sc["name"]
            continue
        assert_scenario_matches_reference(sc, ranks, make, str(tmp_path))


# ---- what deploy refuses: one InputError naming the plan's JSON path (exit 2 in tag deploy) ---------------------
def _refusal(models, model, groups, strategy, n_dev, nproc=None):
    from tag.deploy.schedule import build_schedule
    from tag.errors import InputError
    from tag.graph import load_model

    with pytest.raises(InputError) as e:
        build_schedule(load_model(models[model], batch_size=B), groups, strategy, ["m0"] * n_dev, nproc, "p.json")
    return str(e.value)


def test_combinations_deploy_cannot_run_are_refused(models):
    col, row = heads([[0, 1]], split="column"), heads([[0, 1]], split="row")
    assert _refusal(models, "mlp2", MLP_GROUPS["two"], Strategy((D((12, 12, 0, 0), shard=col),
                                                                 D((12, 12, 0, 0), shard=row))), 4, nproc=2) == (
        "--nproc: 2: expected a rank count that gives each device of p.json decisions[0].shard its own rank, found "
        "two of its devices on one rank")
    assert _refusal(models, "mlp2", MLP_GROUPS["one"], Strategy((D((12, 12), shard=col),)), 2) == (
        "p.json: decisions[0].shard.split: expected a split the group's ops allow, found column: Gemm node_linear_1 "
        "takes a split input (a column split shards one weight op's outputs)")
    inexact = Strategy((D((12, 0)), D((12, 12), shard=heads([[0, 1]], (0.25, 0.75))), D((12, 0)), D((12, 0))))
    assert _refusal(models, "gpt", GPT_GROUPS, inexact, 2) == (
        "p.json: decisions[1].shard.ratios: expected shares that split the 6 heads exactly, found [0.25, 0.75]")


# ---- tag deploy on a sharded plan.json ---------------------------------------------------------------------------
def test_tag_deploy_runs_a_sharded_plan(models, tmp_path):
    """mlp2 as tag plan groups it (Gemm | Relu | Gemm) on 2 cpus: the first Gemm split by columns 1:2 (its split
    output all-gathered for the Relu, which runs data-parallel 6:6 rows), the second by rows 2:1 (each device
    narrows the Relu's output to its features): `tag deploy --nproc 2` trains 3 Adam steps whose
    losses and exported weights equal plain torch."""
    import json
    import subprocess
    import sys

    from tag.cli import main
    from tag.deploy.onnx_torch import TorchProgram
    from tag.graph import load_model
    from tag.modelio import ModelOptions, load_inputs
    from tag.strategy import TrainingConfig
    from tag.strategy.planfile import write_plan

    import onnx

    model = models["mlp2"]
    topo = tmp_path / "cpu2.json"
    topo.write_text(json.dumps({"version": 1, "name": "cpu2", "machines": [
        {"name": "m0", "devices": [{"type": "cpu", "count": 2}]}]}))
    dp = tmp_path / "dp.json"
    assert main(["plan", model, str(topo), "--baseline", "dp-even", "--batch-size", str(B), "-o", str(dp),
                 "--json"]) == 0
    inp = load_inputs(model, str(topo), ModelOptions(batch_size=B), plan_path=str(dp))
    assert [len(g.op_ids) for g in inp.gg.groups] == [1, 1, 1]
    strategy = Strategy((D((12, 12), shard=heads([[0, 1]], split="column")), D((6, 6)),
                         D((12, 12), shard=heads([[0, 1]], (2 / 3, 1 / 3), "row"))), 25.0)
    plan, weights = tmp_path / "shard.json", tmp_path / "w.pt"
    write_plan(str(plan), strategy, inp.gg, inp.cluster, TrainingConfig("adam", 0.01, "mse"), model, str(topo))
    written = json.loads(plan.read_text())["decisions"]
    assert [d.get("shard", {}).get("split") for d in written] == ["column", None, "row"]
    assert written[2]["shard"]["ratios"] == {"m0/0": 2 / 3, "m0/1": 1 / 3}
    p = subprocess.run([sys.executable, "-m", "tag.cli", "deploy", str(plan), model, "--steps", "3", "--nproc", "2",
                        "--export", str(weights), "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    graph = load_model(model, batch_size=B)
    data, targets = synthetic_batch(graph, B, 0)
    ref_losses, ref_params = reference_training(graph, TorchProgram(onnx.load(model), graph, seed=0), data, targets,
                                                3, "adam", 0.01)
    assert out["losses"] == pytest.approx(ref_losses, rel=1e-4)
    trained = torch.load(weights, weights_only=True)
    assert set(trained) == set(ref_params)
    for name, v in ref_params.items():  # whole weights
        torch.testing.assert_close(trained[name], v, rtol=1e-4, atol=1e-6, msg=name)


def test_an_nn_module_does_not_train_a_sharded_plan(models):
    """tag.runtime trains a user nn.Module data-parallel only: a sharded plan is refused naming the shard."""
    from types import SimpleNamespace

    from tag.deploy.schedule import build_schedule
    from tag.errors import InputError
    from tag.graph import load_model
    from tag.runtime.plan import RankPlan

    strategy = Strategy((D((12, 12), shard=heads([[0, 1]], split="column")),
                         D((12, 12), shard=heads([[0, 1]], split="row"))))
    sched = build_schedule(load_model(models["mlp2"], batch_size=B), MLP_GROUPS["two"], strategy, ["m0"] * 2, 2)
    plan = RankPlan(SimpleNamespace(plan_path="p.json"), sched, 0, 2, "cpu")
    with pytest.raises(InputError) as e:
        plan.data_parallel_rows()
    assert str(e.value) == ("p.json: decisions[0].shard: expected a plan without shards to train an nn.Module "
                            "(sharded plans run on the ONNX model through `train_onnx`), found column")

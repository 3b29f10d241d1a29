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
  3-head slice sits on the lower rank), weight gradients summed over each position's peers; the MLP pair likewise.
"""

from __future__ import annotations

import os

import pytest

from tag.deploy.data import synthetic_batch
from tag.strategy import Decision, Strategy
from tag.strategy.shard import Shard
from _deploy_harness import assert_ranks_match_reference, reference_training, run_scenarios

B = 12
ONE_TWO = (1 / 3, 2 / 3)
MLP_GROUPS = {"one": [[0, 1, 2]], "two": [[0, 1], [2]]}
GPT_GROUPS = [[0, 1], list(range(2, 25)), list(range(25, 32)), [32, 33, 34]]  # embeddings, attention, MLP, head


def D(rows, sync=None, shard=None):
    return Decision(tuple(rows), sync, shard=shard)


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
           (4, "mlp-two-replicas", "mlp2", "two",
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
    return [{"name": name, "model": model, "path": models[model], "groups": gk, "strategy": s,
             "machines": ["m0"] * world, "steps": 3, "optimizer": OPT[model][0], "lr": OPT[model][1]}
            for w, name, model, gk, s in _plans() if w == world]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_sharded_plans_train_like_one_device(models, world, tmp_path):
    scenarios = _scenarios(models, world)
    results = run_scenarios(world, scenarios, make, str(tmp_path))
    for sc in scenarios:
        graph, program, _ = make(sc)
        data, targets = synthetic_batch(graph, B, 0)
        ref_losses, ref_params = reference_training(graph, program, data, targets, 3, sc["optimizer"], sc["lr"])
        assert_ranks_match_reference(results[sc["name"]], ref_losses, ref_params, sc["name"])
        assert ref_losses[-1] < ref_losses[0], sc["name"]

"""Tensor-sharded groups inside pipelines and under ZeRO (issue 22: shards compose with stages and row splits) train
exactly like one device: losses and every parameter at rtol 1e-4 against plain single-process torch.optim training
(`_deploy_harness.reference_training`, written independently of the runtime). One spawn per rank count:

- 3 ranks, the tiny GPT (6 heads of 4, MLP 96; `_shard_models.TinyGpt`) in 2 stages: the embeddings on rank 0, the
  attention and MLP blocks sharded by heads 1:2 (2 and 4 heads, hidden units 32 and 64) on ranks 1 and 2 with the
  head data-parallel 4:8 on them, under 1F1B with 2 micro-batches and with 4 (the head on rank 1 alone: its input
  gradient goes back to the blocks' position 0 and is broadcast over the replica); under GPipe with 2 micro-batches
  with the head split by columns 1:1 on ranks [2, 1] (its split logits all-gathered for the loss, per micro-batch);
  and under GPipe with 4 micro-batches the other way round: the embeddings (rows 4:8) and the sharded blocks in
  stage 0 on ranks 0-1, the head in stage 1 on rank 2 (a sharded producer sending across the stages).
- 4 ranks, ZeRO on a sharded group of 2 replicas x 2 positions (each position's slice sharded over that position's
  2 peers, as the simulator does): the GPT's blocks by heads on replicas [1, 0] and [3, 2] (7 and 5 rows) at ZeRO
  1, 2 and 3; the MLP as a column-split then a row-split group on replicas [0, 1] and [2, 3] at ZeRO 3 (the row
  half's Gemm bias in position 0's unit only), once resumed from a checkpoint taken after step 1 (whole parameters
  and Adam states gathered from the ZeRO shards of the slices).
"""

from __future__ import annotations

import os

import pytest
import torch

from tag.deploy.data import synthetic_batch
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage
from _deploy_harness import assert_ranks_match_reference, reference_training, run_scenarios
from test_shard_deploy import B, MLP_GROUPS, OPT, heads, make, models  # noqa: F401 - models is a fixture


def D(rows, sync=None, shard=None, zero=0):
    return Decision(tuple(rows), sync, shard=shard, zero=zero)


def _piped(decisions, stages, m, schedule):
    return Strategy(tuple(decisions), pipeline=Pipeline(tuple(Stage(g, d) for g, d in stages), m, schedule, 1))


BLOCKS_LATE = (((0,), (0,)), ((1, 2, 3), (1, 2)))  # embeddings | sharded blocks and head
BLOCKS_EARLY = (((0, 1, 2), (0, 1)), ((3,), (2,)))  # embeddings and sharded blocks | head


def _plans() -> list[tuple[int, str, str, str, Strategy]]:
    """(world, name, model, groups key, strategy)."""
    late, early = heads([[1, 2]]), heads([[0, 1]])
    grid = heads([[1, 0], [3, 2]])
    out = [(3, "gpt-1f1b-m2", "gpt", "", _piped((D((12, 0, 0)), D((0, 12, 12), shard=late), D((0, 12, 12), shard=late),
                                                  D((0, 4, 8), "ring")), BLOCKS_LATE, 2, "1f1b")),
           (3, "gpt-1f1b-m4", "gpt", "", _piped((D((12, 0, 0)), D((0, 12, 12), shard=late), D((0, 12, 12), shard=late),
                                                  D((0, 12, 0))), BLOCKS_LATE, 4, "1f1b")),
           (3, "gpt-gpipe-m2-column-head", "gpt", "",
            _piped((D((12, 0, 0)), D((0, 12, 12), shard=late), D((0, 12, 12), shard=late),
                    D((0, 12, 12), shard=heads([[2, 1]], (0.5, 0.5), "column"))), BLOCKS_LATE, 2, "gpipe")),
           (3, "gpt-gpipe-m4-blocks-first", "gpt", "",
            _piped((D((4, 8, 0), "ring"), D((12, 12, 0), shard=early), D((12, 12, 0), shard=early), D((0, 0, 12))),
                   BLOCKS_EARLY, 4, "gpipe"))]
    for z in (1, 2, 3):
        out.append((4, f"gpt-two-replicas-zero{z}", "gpt", "",
                    Strategy((D((3, 3, 3, 3), "ring"), D((7, 7, 5, 5), "ring", grid, z), D((7, 7, 5, 5), "tree", grid, z),
                              D((6, 0, 6, 0), "ring")))))
    col, row = heads([[0, 1], [2, 3]], split="column"), heads([[0, 1], [2, 3]], split="row")
    mlp = Strategy((D((4, 4, 8, 8), "ring", col, 3), D((4, 4, 8, 8), "ring", row, 3)))
    out += [(4, "mlp-two-replicas-zero3", "mlp2", "two", mlp), (4, "mlp-two-replicas-zero3-resume", "mlp2", "two", mlp)]
    return out


def _scenarios(models, world):
    out = []
    for w, name, model, gk, s in _plans():
        if w == world:
            out.append({"name": name, "model": model, "path": models[model], "groups": gk, "strategy": s,
                        "machines": ["m0"] * world, "steps": 3, "optimizer": OPT[model][0], "lr": OPT[model][1]})
            if name.endswith("-resume"):
                out[-1]["resume_at"] = 1
    return out


@pytest.mark.parametrize("world", [3, 4])
def test_sharded_groups_in_pipelines_and_under_zero_train_like_one_device(models, world, tmp_path):
    scenarios = _scenarios(models, world)
    results = run_scenarios(world, scenarios, make, str(tmp_path))
    for sc in scenarios:
        graph, program, _ = make(sc)
        data, targets = synthetic_batch(graph, B, 0)
        ref_losses, ref_params = reference_training(graph, program, data, targets, 3, sc["optimizer"], sc["lr"])
        assert ref_losses[-1] < ref_losses[0], sc["name"]  # training moved the loss
        if "resume_at" in sc:  # ranks trained steps [k, 3) from the whole state they saved after step k
            k = sc["resume_at"]
            saved = torch.load(os.path.join(tmp_path, f"{sc['name']}_state.pt"), weights_only=True)
            graph, program, _ = make(sc)
            _, at_k = reference_training(graph, program, data, targets, k, sc["optimizer"], sc["lr"])
            assert saved["step"] == k and set(saved["weights"]) == set(at_k), sc["name"]
            for n, v in at_k.items():  # whole parameters, not slices of ZeRO shards
                torch.testing.assert_close(saved["weights"][n], v, rtol=1e-4, atol=1e-6, msg=f"{sc['name']}: {n}")
                assert set(saved["optimizer"][n]) >= {"exp_avg", "exp_avg_sq"}, n
                assert saved["optimizer"][n]["exp_avg"].shape == v.shape, n  # whole Adam states
            ref_losses = ref_losses[k:]
        assert_ranks_match_reference(results[sc["name"]], ref_losses, ref_params, sc["name"])


def test_zero_units_of_a_sharded_group_are_per_position(models):
    """The 2 x 2 MLP grid at ZeRO 3 (replicas [0, 1] and [2, 3]): one unit per position and group, over that
    position's peers ({0, 2} and {1, 3}); the row half's bias (position 0 only) in position 0's unit; no bucket left
    for the reduce-scattered gradients. Parameter names as the exporter writes them (fc1, fc2)."""
    from tag.deploy.schedule import build_schedule
    from tag.graph import load_model

    strategy = [s for _, name, _, _, s in _plans() if name == "mlp-two-replicas-zero3"][0]
    sched = build_schedule(load_model(models["mlp2"], batch_size=B), MLP_GROUPS["two"], strategy, ["m0"] * 4, 4)
    got = sorted((u.group, u.ranks, u.params) for u in sched.zero_units)
    assert got == [(0, (0, 2), ("fc1.weight", "fc1.bias")), (0, (1, 3), ("fc1.weight", "fc1.bias")),
                   (1, (0, 2), ("fc2.weight", "fc2.bias")), (1, (1, 3), ("fc2.weight",))]
    assert [b for b in sched.buckets if b.groups] == []


def test_sfb_in_a_sharded_group_is_refused_as_plan_check_refuses_it(models):
    """The one combination of this file's kind that plan check refuses too: SFB ops in a sharded group (their weight
    gradients sum by position)."""
    from tag.deploy.schedule import build_schedule
    from tag.errors import InputError
    from tag.graph import load_model

    col = heads([[0, 1]], split="column")
    sfb = Strategy((Decision((12, 12), shard=col, sfb=("node_linear",)), D((12, 12), shard=heads([[0, 1]], split="row"))))
    with pytest.raises(InputError) as e:
        build_schedule(load_model(models["mlp2"], batch_size=B), MLP_GROUPS["two"], sfb, ["m0"] * 2, 2, "p.json")
    assert str(e.value) == "p.json: decisions[0].sfb: expected no SFB op in a sharded group, found ['node_linear']"

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
- Tied weights in a sharded group (kept whole, summed over every rank of the groups that read them): gpt2_tiny in
  tag plan's 16 groups with its LM head (Transpose of the token table, MatMul) split by vocabulary 1:2 on ranks 1-2
  of 3 and on replicas [1, 0] and [3, 2] of 4; `_shard_models.TiedLm`, whose embedding lookup sits in a
  column-split group (position 0's gradient of the table counts) and whose head reads the same table, data-parallel
  on 3 ranks and split by vocabulary on a 2 x 2 grid.
"""

from __future__ import annotations

import os

import pytest

from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage
from _deploy_harness import assert_scenario_matches_reference, run_scenarios
from test_shard_deploy import B, MLP_GROUPS, OPT, heads, models  # noqa: F401 - models is a fixture
from test_shard_deploy import make as make_small

GPT2_TINY = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "gpt2_tiny.onnx")
K_GPT2 = 16  # groups of gpt2_tiny as tag plan coarsens it for 2-4 devices; the last is the tied LM head


TIED_LM_GROUPS = [[0, 1, 2], [3], [4]]  # Gather(tok) Gemm Relu | Gemm | Gemm(., tok, transB)


def make(sc):
    """(graph, program, groups) of a scenario's model, parameters seeded 0; gpt2_tiny in tag plan's groups."""
    if sc["model"] not in ("gpt2_tiny", "tied_lm"):
        return make_small(sc)
    import onnx

    from tag.deploy.onnx_torch import TorchProgram
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    graph = load_model(sc["path"], batch_size=B)
    groups = TIED_LM_GROUPS if sc["model"] == "tied_lm" else [list(g.op_ids) for g in coarsen(graph, k=K_GPT2).groups]
    return graph, TorchProgram(onnx.load(sc["path"]), graph, seed=0), groups


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
    # GPT-2's LM head reads the token embedding's table (Transpose, MatMul): tied weights, split by vocabulary
    rest3, rest4 = tuple(D((4, 4, 4), "ring") for _ in range(K_GPT2 - 1)), tuple(D((3, 3, 3, 3), "tree")
                                                                              for _ in range(K_GPT2 - 1))
    out += [(3, "gpt2-tied-head-column", "gpt2_tiny", "",
             Strategy(rest3 + (D((0, 12, 12), shard=heads([[1, 2]], split="column")),))),
            (4, "gpt2-tied-head-two-replicas", "gpt2_tiny", "",
             Strategy(rest4 + (D((7, 7, 5, 5), "ring", heads([[1, 0], [3, 2]], split="column")),)))]
    # the embedding table read whole by a sharded group's Gather (position 0's gradient counts) and by the head
    c3, r3 = heads([[1, 2]], split="column"), heads([[1, 2]], split="row")
    c4, r4 = heads([[1, 0], [3, 2]], split="column"), heads([[1, 0], [3, 2]], split="row")
    out += [(3, "tied-lm-gather-in-shard", "tied_lm", "",
             Strategy((D((0, 12, 12), shard=c3), D((0, 12, 12), shard=r3), D((4, 4, 4), "ring")))),
            (4, "tied-lm-gather-and-head-sharded", "tied_lm", "",
             Strategy((D((7, 7, 5, 5), "ring", c4), D((7, 7, 5, 5), "ring", r4),
                       D((6, 6, 6, 6), "ring", heads([[0, 1], [2, 3]], split="column")))))]
    out += [(4, "mlp-two-replicas-zero3", "mlp2", "two", mlp), (4, "mlp-two-replicas-zero3-resume", "mlp2", "two", mlp)]
    return out


@pytest.fixture(scope="module")
def all_models(models, tmp_path_factory):
    from _shard_models import tied_lm

    return {**models, "gpt2_tiny": GPT2_TINY, "tied_lm": tied_lm(str(tmp_path_factory.mktemp("tied") / "lm.onnx"), B)}


def _scenarios(models, world):
    out = []
    for w, name, model, gk, s in _plans():
        if w == world:
            opt, lr = OPT.get(model, OPT["gpt" if model == "gpt2_tiny" else "mlp2"])
            out.append({"name": name, "model": model, "path": models[model], "groups": gk, "strategy": s,
                        "machines": ["m0"] * world, "steps": 3, "optimizer": opt, "lr": lr})
            if name.endswith("-resume"):
                out[-1]["resume_at"] = 1
    return out


@pytest.mark.parametrize("world", [3, 4])
def test_sharded_groups_in_pipelines_and_under_zero_train_like_one_device(all_models, world, tmp_path):
    scenarios = _scenarios(all_models, world)
    results = run_scenarios(world, scenarios, make, str(tmp_path))
    for sc in scenarios:
        assert_scenario_matches_reference(sc, results[sc["name"]], make, str(tmp_path))


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


def test_a_tied_lm_head_is_sharded_on_the_whole_table(all_models):
    """gpt2_tiny's last group is its LM head, Transpose(wte) then MatMul, wte also read by the embedding Gather of
    group 0: split by columns (vocabulary) it is tied; ranks keep wte whole, and its one sum runs over every rank of
    both groups (0, 1, 2), not per position."""
    from tag.deploy.schedule import build_schedule

    sc = {"model": "gpt2_tiny", "path": all_models["gpt2_tiny"]}
    graph, _, groups = make(sc)
    assert [graph.ops[i].op_type for i in groups[-1]] == ["Transpose", "MatMul"]
    strategy = [s for _, name, _, _, s in _plans() if name == "gpt2-tied-head-column"][0]
    sched = build_schedule(graph, groups, strategy, ["m0"] * 3, 3)
    sg = sched.shards[K_GPT2 - 1]
    assert sg.tied == {"wte.weight"} and set(sg.sliced) == {"wte.weight"}
    assert [(b.ranks, b.params) for b in sched.buckets if "wte.weight" in b.params] == [((0, 1, 2), ("wte.weight",))]

"""Training-mode BatchNormalization and Dropout inside a tensor-sharded group train like one device.

The CNN of test_train_bn_dropout (Conv 1->4 channels, BatchNormalization training_mode=1, ReLU, Dropout 0.25 | Flatten,
Linear), its first group split by output channels: each position normalises its own channels with the statistics of
its replica's rows summed over the position's peers (the same channels' other rows), and draws the dropout mask of
the whole global batch cut to its replica's rows and its channels. Against that file's single-process reference
(plain torch.optim, the masks of (seed, step)), absolute 1e-5 as there, on a 1-replica grid (channels 1:3 on ranks
1-2, then 2:2 on ranks [2, 0]) on 3 ranks and on a 2 x 2 grid (BatchNormalization's sums over 2 peers) on 4 ranks.
"""

from __future__ import annotations

import numpy as np
import torch

from _deploy_harness import run_scenarios
from tag.deploy.onnx_torch.ops_nn import TrainingContext, training_context
from tag.strategy import Decision, Strategy
from tag.strategy.shard import Shard
from test_train_bn_dropout import B, LR, SEED, STEPS, _export, _make, _node, _reference

GROUPS = [[0, 1, 2, 3, 4, 5], [6, 7]]  # Conv BatchNormalization Relu Constant Constant Dropout | Flatten Gemm


def _sharded(rows, replicas, ratios, head_rows) -> Strategy:
    shard = Shard("column", tuple(tuple(r) for r in replicas), tuple(ratios))
    sync = "ring" if len(replicas) > 1 else None
    return Strategy((Decision(tuple(rows), sync, shard=shard), Decision(tuple(head_rows), "ring")))


PLANS = {3: {"channels-1-3": _sharded((0, 16, 16), [[1, 2]], (0.25, 0.75), (6, 5, 5)),
             "channels-2-2-crossed": _sharded((16, 0, 16), [[2, 0]], (0.5, 0.5), (0, 16, 0))},
         4: {"two-replicas": _sharded((5, 5, 11, 11), [[0, 1], [2, 3]], (0.5, 0.5), (4, 4, 4, 4))}}


def test_sharded_batchnorm_and_dropout_train_like_one_device(tmp_path):
    from tag.graph import load_model

    path = str(tmp_path / "cnn_bn.onnx")
    _export(path)
    graph = load_model(path, batch_size=B)
    assert [graph.ops[i].op_type for i in GROUPS[0]][:2] == ["Conv", "BatchNormalization"]
    assert graph.ops[GROUPS[0][-1]].op_type == "Dropout"
    ref_losses, ref_params = _reference(path, graph)
    for world, plans in PLANS.items():
        scenarios = [{"name": k, "strategy": s, "machines": ["m0"] * world, "steps": STEPS, "seed": SEED,
                      "optimizer": "adam", "lr": LR, "model": (path, graph, GROUPS)} for k, s in plans.items()]
        res = run_scenarios(world, scenarios, _make, str(tmp_path))
        for name, ranks in res.items():
            seen = set()
            for r in ranks:
                assert np.allclose(r["losses"], ref_losses, rtol=0, atol=1e-5), name
                for p, value in r["params"].items():  # whole (running statistics gathered from their slices)
                    seen.add(p)
                    assert torch.allclose(value, ref_params[p], atol=1e-5), (name, p)
            assert seen == set(ref_params), name


def test_a_positions_dropout_mask_is_its_features_of_the_whole_mask():
    """Rows [4, 9) of a 10-row batch, features [3, 8) of 12: the cut of the one-device mask."""
    from tag.deploy.onnx_torch.ops_nn import _dropout

    node = _node("Dropout", {}, 2)
    ratio, training = torch.tensor(0.25), torch.tensor(True)
    with training_context(TrainingContext(seed=3, step=2, batch_axis=lambda t: 0)):
        whole = _dropout(node, [torch.ones(10, 12), ratio, training])[1]
    ctx = TrainingContext(seed=3, step=2, row_offset=4, global_rows=10, batch_axis=lambda t: 0,
                          feature_slice=lambda t: (-1, 3, 12))
    with training_context(ctx):
        part = _dropout(node, [torch.ones(5, 5), ratio, training])[1]
    assert torch.equal(part, whole[4:9, 3:8])

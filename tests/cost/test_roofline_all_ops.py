"""The roofline model's group times come from one evaluation over every group's ops (`_group_op_ms`): each group's
times must equal those of its own ops evaluated alone (`op_ms`), to the bit, in any order of asking and across
evictions of the kept evaluations."""

import random

import numpy as np
import pytest

from tag.cost import RooflineCostModel
from tag.cost import roofline
from tag.modelio import ModelOptions, load_inputs
from tag.strategy import TrainingConfig
from tag.topology.catalog import CATALOG

TYPES = [CATALOG["A100-40GB"], CATALOG["V100-32GB"], CATALOG["T4-16GB"]]


@pytest.fixture(scope="module")
def inception():
    # convolutions (Winograd-eligible ones among them), matmul, pooling, concat: every op class the formula treats apart
    return load_inputs("datasets/models/inception_tiny.onnx", "datasets/topologies/modern8.json", ModelOptions()).gg


@pytest.mark.parametrize("precision,layout", [("fp32", "nhwc"), ("fp16", "nchw"), ("bf16", "nhwc"), ("tf32", "nhwc")])
def test_group_times_equal_each_group_evaluated_alone(inception, precision, layout):
    gg = inception
    cm = RooflineCostModel(gg, TrainingConfig(precision=precision), conv_layout=layout)
    alone = RooflineCostModel(gg, TrainingConfig(precision=precision), conv_layout=layout)
    rng = random.Random(7)
    keys = [(g, t, r, ph) for g in range(gg.n_groups) for t in TYPES for r in (1, 5, 64) for ph in ("fwd", "bwd")]
    rng.shuffle(keys)  # groups asked in a random order, interleaved across row counts and devices
    for g, t, r, ph in keys:
        got = cm.group_fwd_ms(g, t, r) if ph == "fwd" else cm.group_bwd_ms(g, t, r)
        ops = alone.op_ms(g, t, r, ph)
        assert got == (float(ops.sum()) if ops.size else 0.0), (g, t.name, r, ph)


def test_shard_parts_equal_each_group_evaluated_alone(inception):
    gg = inception
    cm = RooflineCostModel(gg, TrainingConfig(precision="fp16"))
    for g in range(gg.n_groups):
        ids = cm.compute_ops[g]
        if not ids:
            continue
        some = ids[::2]
        for share in (1.0, 0.5, 0.125):
            want = float(cm.op_ms(g, TYPES[0], 32, "bwd", share)[[i in set(some) for i in ids]].sum())
            assert cm.ops_ms(g, TYPES[0], 32, "bwd", some, share) == want


def test_evicted_evaluations_give_the_same_times(inception, monkeypatch):
    monkeypatch.setattr(roofline, "VECTORS_KEPT", 2)  # every third row count evicts the oldest evaluation
    gg = inception
    cm = RooflineCostModel(gg, TrainingConfig())
    for r in range(1, 12):
        for g in range(gg.n_groups):
            ops = cm.op_ms(g, TYPES[1], r, "fwd")
            assert cm.group_fwd_ms(g, TYPES[1], r) == (float(ops.sum()) if ops.size else 0.0)
    assert len(cm._vectors) <= 2
    assert np.array_equal(cm._group_op_ms(0, TYPES[1], 3, "fwd"), cm.op_ms(0, TYPES[1], 3, "fwd"))

"""Sharded groups on a grid of replicas, under ZeRO and in a pipeline, and the plan check of shards: hand-worked
on the 4096 x 4096 Gemm of test_shard_linear (batch 64, ring over 100 Gbit/s = 12.5e6 bytes per ms, 2 us a hop)."""

import json

import pytest

from tag.sim import simulate
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage
from tag.strategy.shard import Shard
from tag.topology.loader import parse_topology

from test_shard_linear import B, F_FWD, HOP, LINK, N, S, SLOW_PEAK, _flows, _setup

GRID = Shard("column", ((0, 1), (2, 3)), (0.25, 0.75))  # two replicas of (slow, fast)
W_SLOW, W_FAST = (1024 * N + 1024) * 4.0, (3072 * N + 3072) * 4.0  # each position's weight and bias bytes


def _four(setup):
    gg, _, cost, training = setup
    cl = parse_topology({
        "version": 1,
        "device_types": {"slow": {"peak_tflops": 10.0, "memory_gb": 16, "memory_bandwidth_gbps": 1e9},
                         "fast": {"peak_tflops": 30.0, "memory_gb": 16, "memory_bandwidth_gbps": 1e9}},
        "machines": [{"name": "m0", "devices": [{"type": "slow", "count": 1}, {"type": "fast", "count": 1},
                                                {"type": "slow", "count": 1}, {"type": "fast", "count": 1}],
                      "intra_bandwidth_gbps": 100}]}, "grid")
    return gg, cl, cost, training


def test_weight_gradients_sum_per_position_over_its_peers(tmp_path):
    """Position 0's slices (W_SLOW bytes) are summed over devices 0 and 2, position 1's over 1 and 3: a ring
    all-reduce of 2 devices each, S_j per hop, both at once on disjoint links."""
    gg, cl, cost, tr = _four(_setup(tmp_path))
    res = simulate(gg, cl, cost, Strategy((Decision((B // 2,) * 4, sync="ring", shard=GRID),)), tr, trace=True)
    p0, p1 = _flows(res, "sync g0 p0"), _flows(res, "sync g0 p1")
    assert len(p0) == len(p1) == 1
    assert p0[0]["dur"] == pytest.approx(W_SLOW / LINK, rel=1e-9)
    assert p1[0]["dur"] == pytest.approx(W_FAST / LINK, rel=1e-9)
    assert res.batch_size == B


def test_zero_reduce_scatters_each_position_over_its_replicas(tmp_path):
    """ZeRO 1 over R = 2 replicas: position j reduce-scatters S_j ((n-1)/n x S_j per hop) and all-gathers it back
    after the step, instead of the all-reduce's 2 (n-1)/n x S_j."""
    gg, cl, cost, tr = _four(_setup(tmp_path))
    res = simulate(gg, cl, cost, Strategy((Decision((B // 2,) * 4, sync="ring", shard=GRID, zero=1),)), tr,
                   trace=True)
    rs, ag = _flows(res, "reduce-scatter g0 p1"), _flows(res, "gather w g0 p1")
    assert len(rs) == len(ag) == 1
    assert rs[0]["dur"] == pytest.approx(0.5 * W_FAST / LINK, rel=1e-9)
    assert ag[0]["dur"] == pytest.approx(0.5 * W_FAST / LINK, rel=1e-9)


def test_a_pipelined_sharded_group_gathers_per_micro_batch(tmp_path):
    """One stage, GPipe, m = 2 on the two devices: each micro-batch's forward (f = 1/4 F_FWD / 2 / slow peak on
    both devices) is followed by the gather of its half of Y (g = 3/4 x S/2 / LINK + HOP), so the forwards end at
    2 (f + g) against 2 f + (3/4 S / LINK + HOP) unpipelined: one hop more; the backwards then take the same."""
    setup = _setup(tmp_path)
    gg, cl, cost, tr = setup
    dec = Decision((B, B), shard=Shard("column", ((0, 1),), (0.25, 0.75)))
    whole = simulate(gg, cl, cost, Strategy((dec,)), tr)
    pl = Pipeline((Stage((0,), (0, 1)),), 2, "gpipe")
    piped = simulate(gg, cl, cost, Strategy((dec,), pipeline=pl), tr, trace=True)
    assert piped.iteration_ms - whole.iteration_ms == pytest.approx(HOP, rel=1e-6)
    gathers = _flows(piped, "shard fwd g0 mb")
    assert len(gathers) == 2 and all(e["dur"] == pytest.approx(0.375 * S / LINK, rel=1e-9) for e in gathers)
    f = 0.25 * F_FWD / 2 / SLOW_PEAK
    assert sorted(e["ts"] for e in gathers) == pytest.approx([f, 2 * f + 0.375 * S / LINK + HOP], rel=1e-9)


def _plan(tmp_path, edit):
    """The docs' complete example (mlp on cpu4) with `edit` applied, as `tag simulate` reads it; (exit code,
    stderr)."""
    import copy
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "docs"))
    from docs_fences import ROOT, json_fences

    from tag.cli import main

    plan = copy.deepcopy(json_fences("plan.md")[0][1])
    for key in ("predicted", "baselines", "search"):
        plan.pop(key, None)
    edit(plan)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan))
    model, topo = (os.path.join(ROOT, plan[k]["path"]) for k in ("model", "topology"))
    return main(["simulate", model, topo, "--plan", str(path), "--json"])


ALL = ("local/0", "local/1", "local/2", "local/3")


def test_plan_check_accepts_a_sharded_group_and_refuses_a_split_its_ops_do_not_allow(tmp_path, capsys):
    def column(p):
        p["decisions"][0].update(rows={d: 128 for d in ALL}, sync=None,
                                 shard={"split": "column", "ratios": {d: 0.25 for d in ALL}})
        p["buckets"] = [b for b in p["buckets"] if b["groups"] != [0]]  # one replica: nothing to sum

    assert _plan(tmp_path, column) == 0
    out = json.loads(capsys.readouterr().out)
    assert not out["oom"] and out["iteration_ms"] > 0

    def relu(p):
        p["decisions"][1].update(rows={d: 128 for d in ALL}, shard={"split": "row", "ratios": {d: 0.25 for d in ALL}})

    assert _plan(tmp_path, relu) == 2
    assert capsys.readouterr().err.strip().endswith(
        "decisions[1].shard.split: expected a split the group's ops allow (another split, or no shard), "
        "found 'row' (no weight op to split)")


def test_heads_need_shares_that_split_them_exactly():
    from tag.graph import load_model
    from tag.strategy.plancheck import _check_shard
    from tag.errors import InputError

    g = load_model("datasets/models/small_transformer.onnx")
    idx = g.op_index()
    ops = list(range(idx["node_Transpose_13"], idx["node_add_103"] + 1))  # attention of layer 0: 4 heads
    _check_shard("p.json", "decisions[3]", g, ops, Decision((8, 8), shard=Shard("heads", ((0, 1),), (0.25, 0.75))))
    with pytest.raises(InputError, match=r"decisions\[3\].shard.ratios: expected shares that split the group's 4 "
                                          r"heads into whole heads per device, found \[0.4, 0.6\]"):
        _check_shard("p.json", "decisions[3]", g, ops, Decision((8, 8), shard=Shard("heads", ((0, 1),), (0.4, 0.6))))

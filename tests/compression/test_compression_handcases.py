"""SFB on hand-built FC models: the simulator's SFB time and the selection, against numbers worked out here."""

from __future__ import annotations

import pytest
from sfbkit import TRAINING, FixedCost, cluster, dp, fc_model

from tag.compression import eligible_ops, select_sfb, sfb_summary
from tag.graph.groups import GroupGraph
from tag.sim import simulate

LINK_1GBPS = 1e9 / 8 / 1e3  # bytes per ms
MEM = 1e9  # 8000 Gbps of memory: bytes per ms
FLOPS = 1e10  # 10 TFLOPS: FLOP per ms
ALPHA = 0.012  # route latency m0/0 -> m1/0: 1 us + 10 us + 1 us, in ms


def dw(rows, k, n):
    """X^T dY at full efficiency, no launch: max(FLOPs / peak, bytes / memory bandwidth)."""
    return max(2 * rows * k * n / FLOPS, 4 * (rows * k + rows * n + k * n) / MEM)


def test_sfb_wins_few_rows_big_fc_slow_link():
    # 8 rows, 4096 x 4096 FC on two machines joined by 1 Gbps: all-reduce 64 MiB vs all-gather 2 x 128 KiB
    gg, cl, cost = fc_model([(4096, 4096)], 8), cluster(2, link_gbps=1.0), FixedCost([0.1], [0.2])
    w = 4096 * 4096 * 4
    fwd, bwd = 0.1 * 4, 0.2 * 4
    without = fwd + bwd + (2 * 1 / 2 * w) / LINK_1GBPS + 2 * ALPHA
    gather = (1 / 2 * 8 * 4096 * 4) / LINK_1GBPS + ALPHA  # one factor (X or dY), (n-1)/n of it per hop
    with_sfb = fwd + (bwd - dw(4, 4096, 4096)) + 2 * gather + dw(8, 4096, 4096)
    r0 = simulate(gg, cl, cost, dp(1, [4, 4]), TRAINING)
    r1 = simulate(gg, cl, cost, dp(1, [4, 4], sfb=[("fc0",)]), TRAINING)
    assert r0.iteration_ms == pytest.approx(without, rel=1e-9)
    assert r1.iteration_ms == pytest.approx(with_sfb, rel=1e-9)
    s, rep = select_sfb(gg, cl, cost, TRAINING, dp(1, [4, 4]))
    assert s.decisions[0].sfb == ("fc0",)
    assert rep["ops"] == ["fc0"] and rep["ms_saved"] == pytest.approx(without - with_sfb, rel=1e-9)
    # link bytes: all-reduce puts w on each direction of the m0-m1 link and both device links of each side
    assert rep["bytes_saved"] > 0
    assert rep["per_group"][0]["weight_bytes"] == w and rep["per_group"][0]["factor_bytes"] == 2 * 8 * 4096 * 4
    assert any("fc0" in line for line in sfb_summary(rep))


def test_sfb_loses_many_rows_small_fc_fast_link():
    # 4096 rows through a 64 x 64 FC on 100 Gbps: all-reduce 16 KiB vs all-gather 2 x 1 MiB
    gg, cl, cost = fc_model([(64, 64)], 4096), cluster(2, link_gbps=100.0), FixedCost([1e-4], [2e-4])
    link = 100e9 / 8 / 1e3
    w = 64 * 64 * 4
    fwd, bwd = 1e-4 * 2048, 2e-4 * 2048
    without = fwd + bwd + w / link + 2 * ALPHA
    gather = (1 / 2 * 4096 * 64 * 4) / link + ALPHA
    with_sfb = fwd + (bwd - dw(2048, 64, 64)) + 2 * gather + dw(4096, 64, 64)
    assert with_sfb > without
    r1 = simulate(gg, cl, cost, dp(1, [2048, 2048], sfb=[("fc0",)]), TRAINING)
    assert r1.iteration_ms == pytest.approx(with_sfb, rel=1e-9)
    s, rep = select_sfb(gg, cl, cost, TRAINING, dp(1, [2048, 2048]))
    assert s.decisions[0].sfb == () and rep["ops"] == [] and rep["ms_saved"] == 0.0
    assert rep["iteration_ms_with"] == pytest.approx(without, rel=1e-9)
    assert sfb_summary(rep) == ["SFB: no op chosen of 1 eligible"]


def test_bias_stays_in_allreduce_and_three_replicas():
    # a group with a 4096 x 4096 SFB weight and 1 MB of other parameters, 3 machines through a 10 Gbps switch:
    # the all-reduce keeps the 1 MB, volume 2(n-1)/n = 4/3 of it per hop
    extra = 1_000_000
    gg = fc_model([(4096, 4096)], 6, extra_params=[extra])
    cl, cost = cluster(3, link_gbps=10.0), FixedCost([0.1], [0.2])
    link = 10e9 / 8 / 1e3
    alpha = max(cl.latency_us[a][b] for a, b in ((0, 1), (1, 2), (2, 0))) / 1e3
    ring_ar = 4 / 3 * extra / link + 4 * alpha
    gather = 2 / 3 * (6 * 4096 * 4) / link + 2 * alpha
    expect = 0.2 + (0.4 - dw(2, 4096, 4096)) + 2 * gather + ring_ar + dw(6, 4096, 4096)
    r1 = simulate(gg, cl, cost, dp(1, [2, 2, 2], sfb=[("fc0",)]), TRAINING)
    assert r1.iteration_ms == pytest.approx(expect, rel=1e-9)


def test_eligibility():
    gg = fc_model([(64, 32), (32, 16)], 8)
    assert [c.op_name for c in eligible_ops(gg, dp(2, [4, 4]))] == ["fc0", "fc1"]
    # a group on one device is not replicated: nothing to sync
    from tag.strategy import Decision, Strategy
    one = Strategy((Decision((8, 0)), Decision((4, 4), "allreduce")))
    assert [c.op_name for c in eligible_ops(gg, one)] == ["fc1"]
    # a weight shared with another op (tied) is not eligible (graphs are read-only once built: a fresh one)
    tied = fc_model([(64, 64), (64, 64)], 8)
    tied.graph.ops[1].inputs[1] = "W0"
    assert [c.op_name for c in eligible_ops(tied, dp(2, [4, 4]))] == []
    # a MatMul whose second input is an activation is not
    gg2 = fc_model([(64, 32)], 8)
    gg2.graph.tensors["W0"].role = "activation"
    assert eligible_ops(gg2, dp(1, [4, 4])) == []
    assert isinstance(gg2, GroupGraph)

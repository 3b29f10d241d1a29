"""SFB on transformer-style Linear layers (Transpose(W) -> MatMul on [batch, seq, K] activations), and on
W X products: factors, simulated time and bytes worked out by hand here, eligibility, brute force."""

from __future__ import annotations

import pytest
from sfbkit import TRAINING, FixedCost, cluster, dp, fc_model, random_instance
from test_compression_bruteforce import brute_force

from tag.compression import eligible_ops, select_sfb
from tag.graph.groups import Group, GroupGraph
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.sim import simulate
from tag.sim.sfb import sfb_factors, sfb_form

LINK_1GBPS = 1e9 / 8 / 1e3  # bytes per ms
MEM = 1e9  # bytes per ms of the sfbkit device
FLOPS = 1e10  # FLOP per ms
ALPHA = 0.012  # route latency m0/0 -> m1/0 in ms


def dw(rows, k, n):
    return max(2 * rows * k * n / FLOPS, 4 * (rows * k + rows * n + k * n) / MEM)


def test_linear_3d_factors_and_time_by_hand():
    # 4 sequences of 16 tokens through a 1024 -> 2048 Linear (W stored 2048 x 1024), 2 machines at 1 Gbps
    b, s, k, n = 4, 16, 1024, 2048
    gg, cl, cost = fc_model([(k, n)], b, seq=s), cluster(2, link_gbps=1.0), FixedCost([0.1], [0.2])
    f = sfb_factors(gg.graph, 1)
    assert (f.weight, f.k, f.n, f.factor_rows_per_row) == ("W0", k, n, 16.0)
    assert f.x_bytes_per_row == s * k * 4 and f.dy_bytes_per_row == s * n * 4 and f.weight_bytes == k * n * 4
    assert [c.op_name for c in eligible_ops(gg, dp(1, [2, 2]))] == ["fc0"]
    w = k * n * 4
    fwd, bwd = 0.1 * 2, 0.2 * 2
    without = fwd + bwd + (2 * 1 / 2 * w) / LINK_1GBPS + 2 * ALPHA
    # all-gathers of X (4 x 16 x 1024 floats) and dY (4 x 16 x 2048 floats): half of each crosses the link
    gather_x = (1 / 2 * b * s * k * 4) / LINK_1GBPS + ALPHA
    gather_dy = (1 / 2 * b * s * n * 4) / LINK_1GBPS + ALPHA
    with_sfb = fwd + (bwd - dw(2 * s, k, n)) + gather_x + gather_dy + dw(b * s, k, n)
    r0 = simulate(gg, cl, cost, dp(1, [2, 2]), TRAINING)
    r1 = simulate(gg, cl, cost, dp(1, [2, 2], sfb=[("fc0",)]), TRAINING)
    assert r0.iteration_ms == pytest.approx(without, rel=1e-9)
    assert r1.iteration_ms == pytest.approx(with_sfb, rel=1e-9)
    st, rep = select_sfb(gg, cl, cost, TRAINING, dp(1, [2, 2]))
    assert st.decisions[0].sfb == ("fc0",)
    assert rep["per_group"][0]["weight_bytes"] == w
    assert rep["per_group"][0]["factor_bytes"] == b * s * (k + n) * 4


def _left_graph(trans_w: bool):
    """Y = M X with X [2, 8, 5] (batch axis 0), M = W (6 x 8) or Transpose(W) with W 8 x 6; Y [2, 6, 5]."""
    t = {"x": TensorInfo("x", "float32", (2, 8, 5), 0, "data", None, []),
         "y": TensorInfo("y", "float32", (2, 6, 5), 0, "activation", None, [])}
    ops = []
    if trans_w:
        t["W"] = TensorInfo("W", "float32", (8, 6), None, "param", None, [0])
        t["Wt"] = TensorInfo("Wt", "float32", (6, 8), None, "param", 0, [1])
        ops.append(Op("t", "Transpose", "", ["W"], ["Wt"], attrs={"perm": [1, 0]}, is_weight_generator=True))
        m = "Wt"
    else:
        t["W"] = TensorInfo("W", "float32", (6, 8), None, "param", None, [0])
        m = "W"
    t["x"].consumers.append(len(ops))
    t["y"].producer = len(ops)
    ops.append(Op("mm", "MatMul", "", [m, "x"], ["y"], op_class="matmul", params=["W"], param_count=48,
                  param_bytes=192.0))
    g = OpGraph("left.onnx", ops, t, ["x"], ["W"], ["y"], 2, 2)
    return GroupGraph(g, [Group(0, list(range(len(ops))), True, param_count=48, param_bytes=192.0, params=["W"])], [])


@pytest.mark.parametrize("trans_w", [False, True])
def test_left_product_factors(trans_w):
    gg = _left_graph(trans_w)
    i = len(gg.graph.ops) - 1
    form = sfb_form(gg.graph, i)
    assert (form.weight, form.side, form.trans, form.x_input) == ("W", "left", trans_w, 1)
    f = sfb_factors(gg.graph, i)
    # dM (6 x 8) = sum over the 5 columns of each row's X and dY: 5 factor rows per batch row of K=8 and N=6
    assert (f.k, f.n, f.factor_rows_per_row, f.x_bytes_per_row, f.dy_bytes_per_row) == (8, 6, 5.0, 160.0, 120.0)


def test_linear_eligibility_rules():
    gg = fc_model([(64, 32), (32, 16)], 4, seq=8)
    assert [c.op_name for c in eligible_ops(gg, dp(2, [2, 2]))] == ["fc0", "fc1"]
    # the Transpose in another group than its MatMul: the runtime would ship W^T, not run SFB
    split = GroupGraph(gg.graph, [Group(0, [0, 2, 3], True, params=["W0", "W1"], param_bytes=1.0),
                                  Group(1, [1], True, params=["W0"], param_bytes=1.0)], [])
    assert [c.op_name for c in eligible_ops(split, dp(2, [2, 2]))] == ["fc1"]
    # W tied to another op (a GPT-2 head reading the embedding): not eligible
    tied = fc_model([(64, 64), (64, 64)], 4, seq=8)
    tied.graph.ops[2].inputs[0] = "W0"  # t1 now transposes W0, which t0 also reads
    tied.graph.tensors["W0"].consumers.append(2)
    assert [c.op_name for c in eligible_ops(tied, dp(2, [2, 2]))] == []
    # a Transpose that is not a 2-D swap (perm [0, 1] is the identity) is not read as W^T
    ident = fc_model([(64, 32)], 4, seq=8)
    ident.graph.ops[0].attrs["perm"] = [0, 1]
    assert eligible_ops(ident, dp(1, [2, 2])) == []


@pytest.mark.parametrize("seed", [2, 5, 9])  # all chosen; a subset of 7; a subset of 7
def test_linear_selection_matches_brute_force(seed):
    gg, cl, cost, s = random_instance(seed, max_ops=7, seq=4)
    assert 1 <= len(eligible_ops(gg, s)) <= 7
    best_ms, _ = brute_force(gg, cl, cost, s)
    chosen, rep = select_sfb(gg, cl, cost, TRAINING, s)
    got = simulate(gg, cl, cost, chosen, TRAINING).iteration_ms
    assert got == pytest.approx(rep["iteration_ms_with"], rel=1e-12)
    assert got <= best_ms * (1 + 1e-9)

"""SFB on an embedding Gather (dW = scatter-add of dY rows at the gathered indices): factors, simulated time
and bytes worked out by hand here, and which Gathers are not eligible (tied, constant indices, axis 1)."""

from __future__ import annotations

import pytest
from sfbkit import TRAINING, FixedCost, cluster, dp

from tag.compression import eligible_ops, select_sfb
from tag.graph.groups import Group, GroupGraph
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.sim import simulate
from tag.sim.sfb import sfb_factors

LINK_1GBPS = 1e9 / 8 / 1e3  # bytes per ms
MEM = 1e9  # bytes per ms of the sfbkit device
FLOPS = 1e10  # FLOP per ms
ALPHA = 0.012  # route latency m0/0 -> m1/0 in ms
GATHER_EFF = 0.3  # FixedCost.params_for has no "gather" class: the "other" default applies


def embedding(v: int, d: int, batch: int, seq: int, *, ids_batched: bool = True, axis: int = 0) -> GroupGraph:
    """One group: e = E[ids], E a v x d table, ids [batch, seq] int64 (data, or a constant), e [batch, seq, d]."""
    t = {"E": TensorInfo("E", "float32", (v, d), None, "param", None, [0]),
         "ids": TensorInfo("ids", "int64", (batch, seq), 0 if ids_batched else None,
                           "data" if ids_batched else "constant", None, [0]),
         "e": TensorInfo("e", "float32", (batch, seq, d), 0, "activation", 0, [])}
    op = Op("emb", "Gather", "", ["E", "ids"], ["e"], op_class="gather", params=["E"], param_count=v * d,
            param_bytes=4.0 * v * d, attrs={"axis": axis})
    g = OpGraph("emb.onnx", [op], t, ["ids"] if ids_batched else [], ["E"], ["e"], batch, batch)
    return GroupGraph(g, [Group(0, [0], True, param_count=v * d, param_bytes=4.0 * v * d, params=["E"])], [])


def scatter_ms(rows, v, d):
    """Zero the v x d table, read rows dY rows and indices, read-add-write rows table rows."""
    return max(rows * d / (FLOPS * GATHER_EFF), (4 * (v * d + 3 * rows * d) + 8 * rows) / MEM)


def test_embedding_factors_time_and_bytes_by_hand():
    v, d, b, s = 30000, 256, 8, 16
    gg, cl, cost = embedding(v, d, b, s), cluster(2, link_gbps=1.0), FixedCost([0.01], [0.02])
    f = sfb_factors(gg.graph, 0)
    assert (f.kind, f.weight, f.k, f.n, f.factor_rows_per_row) == ("gather", "E", v, d, 16.0)
    assert f.x_bytes_per_row == s * 8 and f.dy_bytes_per_row == s * d * 4 and f.weight_bytes == v * d * 4
    w = v * d * 4
    fwd, bwd = 0.01 * 4, 0.02 * 4
    without = fwd + bwd + (2 * 1 / 2 * w) / LINK_1GBPS + 2 * ALPHA
    gather_ids = (1 / 2 * b * s * 8) / LINK_1GBPS + ALPHA
    gather_dy = (1 / 2 * b * s * d * 4) / LINK_1GBPS + ALPHA
    with_sfb = fwd + (bwd - scatter_ms(4 * s, v, d)) + gather_ids + gather_dy + scatter_ms(b * s, v, d)
    r0 = simulate(gg, cl, cost, dp(1, [4, 4]), TRAINING)
    r1 = simulate(gg, cl, cost, dp(1, [4, 4], sfb=[("emb",)]), TRAINING)
    assert r0.iteration_ms == pytest.approx(without, rel=1e-9)
    assert r1.iteration_ms == pytest.approx(with_sfb, rel=1e-9)
    st, rep = select_sfb(gg, cl, cost, TRAINING, dp(1, [4, 4]))
    assert st.decisions[0].sfb == ("emb",)
    assert rep["per_group"][0]["factor_bytes"] == b * s * (8 + d * 4)
    assert rep["ms_saved"] == pytest.approx(without - with_sfb, rel=1e-9)


def test_embedding_not_eligible():
    assert [c.op_name for c in eligible_ops(embedding(100, 8, 4, 3), dp(1, [2, 2]))] == ["emb"]
    # indices that are a constant (position ids): the rows do not come from the batch
    assert eligible_ops(embedding(100, 8, 4, 3, ids_batched=False), dp(1, [2, 2])) == []
    # Gather along the table's columns is not a row lookup
    assert eligible_ops(embedding(100, 8, 4, 3, axis=1), dp(1, [2, 2])) == []
    # a table also read by another op (GPT-2's tied LM head)
    tied = embedding(100, 8, 4, 3)
    tied.graph.ops.append(Op("head", "MatMul", "", ["e", "E"], ["z"], params=["E"]))
    tied.graph.tensors["E"].consumers.append(1)
    assert eligible_ops(tied, dp(1, [2, 2])) == []

"""The pipeline search counts a tensor crossing a stage boundary once, however many groups beyond it read it
(issue 21; as the simulator sends it, tests/sim/test_tensor_sent_once.py), worked by hand.

The toy: op0 (group 0) makes h, 250,000 float32 per row = 1e6 bytes per row, read by op1 (group 1) and op2
(group 2); op1 makes y, 25,000 float32 per row = 1e5 bytes per row, read by op2. Edges: 0->1 (h), 0->2 (h),
1->2 (y).

Bytes per row across each cut:
- before group 1: h once = 1e6 (per edge, 0->1 and 0->2: 2e6);
- before group 2: h and y = 1.1e6 (per edge the same: each tensor lies on one crossing edge).

Stages: two machines of one device each, 8 Gbit/s between them (1e6 bytes per ms); FixedCost 1 ms per row
forward, 2 ms backward, so 3 ms per row per group. Batch 4, m = 2 micro-batches of b = 2 rows; a one-device stage
has no sync. Stage time (StageRows.steady_ms) = m x max(compute, transfer) + transfer, with transfer = b x bytes
per row / 1e6 ms:
- cut before 1: stage {0} computes 2 x 3 = 6 ms, stage {1, 2} 12 ms; transfer 2 x 1e6 / 1e6 = 2 ms
  (per edge 4 ms): 2 x 6 + 2 = 14 and 2 x 12 + 2 = 26 ms (per edge 16 and 28);
- cut before 2: stage {0, 1} 12 ms, stage {2} 6 ms; transfer 2 x 1.1e6 / 1e6 = 2.2 ms: 26.2 and 14.2 ms.
So the two-stage DP picks the cut before group 2 (26.2 < 28) per edge and the cut before group 1 (26 < 26.2)
per tensor.
"""

from __future__ import annotations

import os
import sys

import pytest

from tag.graph.coarsen import build_group_graph
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.search.pipeline_dp import best_cuts, brute_force_cuts
from tag.search.pipeline_model import BoundaryBytes, StageModel
from tag.search.pipeline_search import search_cuts

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sim"))
from simkit_builders import FixedCost, make_cluster  # noqa: E402  (the simulator tests' hand-built inputs)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _toy():
    """The toy of the module docstring (tests/sim/test_tensor_sent_once.py's, with y 25,000 floats per row)."""
    width = {"x": 250_000, "h": 250_000, "y": 25_000, "z": 250_000}  # float32 per row
    reads = [["x"], ["h"], ["h", "y"]]
    makes = ["h", "y", "z"]
    ops = [Op(f"op{i}", "Add" if len(r) > 1 else "Relu", "", r, [makes[i]], op_class="elementwise")
           for i, r in enumerate(reads)]
    tensors = {t: TensorInfo(t, "float32", (1, n), 0, "data" if t == "x" else "activation",
                             makes.index(t) if t in makes else None, [i for i, r in enumerate(reads) if t in r])
               for t, n in width.items()}
    graph = OpGraph("toy.onnx", ops, tensors, ["x"], [], ["z"], 1, 4)
    return build_group_graph(graph, [0, 1, 2], [[0], [1], [2]])


class PerEdgeBytes(BoundaryBytes):
    """The count before issue 21's search change: every edge (one per consuming group) summed."""

    def __init__(self, gg):
        super().__init__(gg)
        self.gg = gg

    def into_out(self, lo, hi):
        edges = self.gg.edges
        return (sum(e.bytes_per_row for e in edges if e.src < lo <= e.dst < hi),
                sum(e.bytes_per_row for e in edges if lo <= e.src < hi <= e.dst))


def _model(boundary_cls=BoundaryBytes):
    gg = _toy()
    cluster = make_cluster([1, 1], nic_gbps=8.0, dev_lat_us=0.0, nic_lat_us=0.0)  # 8 Gbit/s = 1e6 bytes/ms
    return StageModel(gg, cluster, FixedCost([1.0, 1.0, 1.0]), "sgd", 4, [0, 1], boundary_cls(gg))


def test_the_toy_edges_carry_h_twice():
    gg = _toy()
    assert [(e.src, e.dst, e.bytes_per_row) for e in gg.edges] == [(0, 1, 1e6), (0, 2, 1e6), (1, 2, 1e5)]


def test_boundary_bytes_per_row_once_and_per_edge():
    gg = _toy()
    once, per_edge = BoundaryBytes(gg), PerEdgeBytes(gg)
    assert [once.across(i) for i in (1, 2)] == [1e6, 1.1e6]
    assert [per_edge.into_out(0, i)[1] for i in (1, 2)] == [2e6, 1.1e6]
    assert once.into_out(1, 3) == (1e6, 0.0) and per_edge.into_out(1, 3) == (2e6, 0.0)
    assert once.into_out(0, 1) == (0.0, 1e6) and per_edge.into_out(0, 1) == (0.0, 2e6)
    assert once.into_out(1, 2) == (1e6, 1e5)  # h in, y out to group 2
    assert once.into_out(2, 3) == (1.1e6, 0.0)  # h and y in
    assert once.into_out(0, 2) == (0.0, 1.1e6)  # h once (its reader 1 is inside) and y


@pytest.mark.parametrize("boundary_cls, cut1, cut2", [
    (BoundaryBytes, (14.0, 26.0, 2.0), (26.2, 14.2, 2.2)),
    (PerEdgeBytes, (16.0, 28.0, 4.0), (26.2, 14.2, 2.2)),
])
def test_stage_times_by_hand(boundary_cls, cut1, cut2):
    model, m = _model(boundary_cls), 2
    for (a_lo, a_hi, b_lo, b_hi), (a_ms, b_ms, x_ms) in (((0, 1, 1, 3), cut1), ((0, 2, 2, 3), cut2)):
        first, second = model.stage(a_lo, a_hi, 0, 1, m, 2), model.stage(b_lo, b_hi, 1, 2, m, 1)
        assert first.micro_rows == second.micro_rows == (2,)
        assert first.compute_ms == pytest.approx(6.0 * (a_hi - a_lo))
        assert second.compute_ms == pytest.approx(6.0 * (b_hi - b_lo))
        assert (first.transfer_ms, first.out_ms) == pytest.approx((x_ms, x_ms))
        assert (second.transfer_ms, second.in_ms) == pytest.approx((x_ms, x_ms))
        assert first.sync_ms == second.sync_ms == 0.0
        assert (first.stage_ms(m), second.stage_ms(m)) == pytest.approx((a_ms, b_ms))


@pytest.mark.parametrize("boundary_cls, slowest_ms, cut", [(BoundaryBytes, 26.0, 1), (PerEdgeBytes, 26.2, 2)])
def test_two_stage_dp_picks_the_cut_by_hand(boundary_cls, slowest_ms, cut):
    model, m = _model(boundary_cls), 2

    def fn(left, lo, hi, dlo, dhi):
        st = model.stage(lo, hi, dlo, dhi, m, min(left, m))
        return float("inf") if st is None else st.stage_ms(m)
    sol = best_cuts([0, 1, 2, 3], [0, 1, 2], 2, fn)[2]
    assert sol.slowest_ms == pytest.approx(slowest_ms)
    assert sol.slowest_ms == pytest.approx(brute_force_cuts([0, 1, 2, 3], [0, 1, 2], 2, fn))
    assert [(c.lo, c.hi, c.dlo, c.dhi) for c in sol.stages] == [(0, cut, 0, 1), (cut, 3, 1, 2)]
    # the search's own DP (sync caps, in-flight memory) finds the same two stages
    found = search_cuts(model, m, [0, 1, 2, 3], [0, 1, 2], 2)[2]
    assert [(c.lo, c.hi) for c in found[0][0].stages] == [(0, cut), (cut, 3)]


def test_real_model_against_the_op_graph():
    """Second method on gpt2_tiny: walk the op graph's tensors (producer group, consumer groups) directly."""
    from tag.modelio import ModelOptions, load_inputs

    inp = load_inputs(os.path.join(ROOT, "datasets", "models", "gpt2_tiny.onnx"),
                      os.path.join(ROOT, "datasets", "topologies", "heterog8.json"), ModelOptions())
    gg = inp.gg
    graph, group = gg.graph, gg.group_of_op()
    tensors = []  # (producer group, reader groups other than it, bytes per row)
    for name, info in graph.tensors.items():
        if info.producer is None or info.producer not in group:
            continue
        src = group[info.producer]
        readers = {group[c] for c in info.consumers if c in group} - {src}
        per_row = info.bytes_per_row(graph.file_batch)
        if readers and per_row > 0:
            tensors.append((src, readers, per_row))
    assert any(len(r) > 1 for _, r, _ in tensors)  # some tensor has several reader groups
    once = BoundaryBytes(gg)
    n = gg.n_groups
    for lo in range(n):
        for hi in range(lo + 1, n + 1):
            into = sum(b for s, r, b in tensors if s < lo and any(lo <= d < hi for d in r))
            out = sum(b for s, r, b in tensors if lo <= s < hi and max(r) >= hi)
            assert once.into_out(lo, hi) == pytest.approx((into, out), rel=1e-12, abs=1e-9)

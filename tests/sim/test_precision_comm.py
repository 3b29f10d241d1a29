"""Bytes on the wire under fp16 / bf16 (tag.sim.precision) against timelines worked out by hand.

Two devices of one machine: device links 80 Gbit/s = 1e7 bytes/ms, 1 us each, a route 0.002 ms. Group 0 runs all
8 rows on device 0; group 1 runs 4 rows on each device (its rows 4..7 move from device 0 to device 1); only group 1
has parameters (S = 4e6 bytes, ring all-reduce over both). The edge carries one float32 activation of 2.5e5 bytes
per row (62,500 elements): 4 rows = 1e6 bytes = 0.1 ms in fp32, 5e5 bytes = 0.05 ms in 16 bits. FixedCost:
forward 1 ms per row, backward 2, update 0.1 (the cost model's compute does not change with precision here).
"""

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.graph.opgraph import TensorInfo
from tag.sim import simulate
from tag.sim.precision import edge_wire_bytes
from tag.strategy import Decision, Strategy, TrainingConfig

BPMS, LAT, S = 1e7, 0.002, 4e6
PER_ROW = 2.5e5


def _gg(extra_int64=False):
    gg = make_gg([dict(), dict(param_bytes=S, param_count=int(S / 4))], [(0, 1, PER_ROW, 0.0)])
    gg.graph.tensors["t0_1"] = TensorInfo("t0_1", "float32", (1, int(PER_ROW / 4)), batch_axis=0)
    if extra_int64:  # token ids beside it: 1,000 int64 per row, never 16-bit
        gg.graph.tensors["ids"] = TensorInfo("ids", "int64", (1, 1000), batch_axis=0)
        gg.edges[0].tensors.append("ids")
        gg.edges[0].bytes_per_row += 8000.0
    return gg


def _run(precision):
    st = Strategy((Decision((8, 0)), Decision((4, 4), "ring")))
    return simulate(_gg(), make_cluster([2]), FixedCost([1.0, 1.0], [0.0, 0.1]), st,
                    TrainingConfig(precision=precision), trace=True, overlap_sync=False)


def _flow_ms(r, prefix):
    """Drain time of the first flow whose label starts with `prefix`, ms."""
    ev = next(e for e in r.trace_events if e["ph"] == "X" and e["pid"] == 1 and e["name"].startswith(prefix))
    return ev["dur"] / 1e3


@pytest.mark.parametrize("precision, act_ms", [("fp32", 0.1), ("tf32", 0.1), ("bf16", 0.05), ("fp16", 0.05)])
def test_activation_transfers_shrink_but_not_the_gradient_all_reduce(precision, act_ms):
    # dev0 F0 0-8, F1 8-12. The activation slice 8 -> 8 + act + 0.002; dev1 F1 then 4 ms, B1 8 ms; its input
    # gradient goes back (act + 0.002) to dev0's B0 (16 ms), which starts when it arrives (dev0's B1 ends at 20
    # first). The all-reduce starts when both devices have ended their whole backward (overlap_sync=False, so it
    # shares no link with the gradient slice): 2 x S/2 / 1e7 + 2 steps; then the step (0.1).
    r = _run(precision)
    x = act_ms + LAT
    assert r.iteration_ms == pytest.approx(8 + x + 4 + 8 + x + 16 + (2 * S / 2 / BPMS + 2 * LAT) + 0.1)
    assert _flow_ms(r, "act g0->g1") == pytest.approx(act_ms)
    assert _flow_ms(r, "grad g1->g0") == pytest.approx(act_ms)
    assert _flow_ms(r, "sync g1") == pytest.approx(2 * S / 2 / BPMS)  # fp32 gradients in every precision
    # device 0's uplink: the activation slice and the all-reduce's S
    assert r.link_bytes["m0/0->m0"] == pytest.approx(act_ms * BPMS + S)
    assert r.link_bytes["m0/1->m0"] == pytest.approx(act_ms * BPMS + S)


def test_integer_tensors_keep_their_size():
    gg = _gg(extra_int64=True)
    assert edge_wire_bytes(gg, gg.edges[0], "bf16") == (PER_ROW / 2 + 8000.0, 0.0)
    assert edge_wire_bytes(gg, gg.edges[0], "fp32") == (PER_ROW + 8000.0, 0.0)


def test_memory_inputs_keep_the_graph_bytes():
    # the memory model applies the precision to received slices itself (tag.sim.memory)
    from tag.sim.build import build_task_graph
    from tag.sim.context import sim_context

    st = Strategy((Decision((8, 0)), Decision((4, 4), "ring")))
    tg = build_task_graph(sim_context(_gg(), make_cluster([2]), FixedCost([1.0, 1.0]), TrainingConfig(precision="bf16")), st)
    assert [b for *_, b in tg.memory.recv] == [4 * PER_ROW]
    assert tg.transfers[0].spec.volume_bytes == 2 * PER_ROW


def test_sfb_factors_travel_in_16_bits():
    # mlp.onnx: a torch Linear exports as Gemm (or MatMul) with W of shape (N, K); its factors per batch row are
    # X (K float32 elements) and dY (N): 4 bytes each in fp32, 2 under bf16 (indices would keep their size).
    from tag import modelio
    from tag.sim.gradsync import group_sfb_syncs
    from tag.sim.sfb import sfb_factors

    inp = modelio.load_inputs("datasets/models/mlp.onnx", "datasets/topologies/cpu4.json")
    gg = inp.gg
    g, i = next((g.id, i) for g in gg.groups for i in g.op_ids if sfb_factors(gg.graph, i, g.op_ids) is not None)
    op = gg.graph.ops[i]
    f = sfb_factors(gg.graph, i, gg.groups[g].op_ids)
    rows = (8, 8, 0, 0)
    dec = Decision(rows, "ring", sfb=(op.name,))
    k, n = f.k, f.n
    assert sorted(gg.graph.tensors[f.weight].shape) == sorted((k, n))  # W is K x N or N x K
    fp32 = group_sfb_syncs(gg, g, dec, "fp32")
    bf16 = group_sfb_syncs(gg, g, dec, "bf16")
    r = 16 * f.factor_rows_per_row  # factor rows of the 16 batch rows
    assert [b for _, b, _ in fp32] == pytest.approx([r * k * 4, r * n * 4])
    assert [b for _, b, _ in bf16] == pytest.approx([r * k * 2, r * n * 2])

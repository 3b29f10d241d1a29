"""The rank-level schedule: device->rank blocks, transfers checked row by row, sync buckets, SFB checks."""

from __future__ import annotations

import itertools
import os

import pytest

from tag.deploy.schedule import build_schedule, device_ranks, rank_rows, shape_closure
from tag.errors import InputError
from tag.strategy import Decision, Strategy
from _deploy_toy import TOY_GROUPS, toy_graph

MACHINES = ["m0", "m0", "m1", "m1"]


def D(rows, sync=None, server=None, sfb=()):
    return Decision(tuple(rows), sync, server, tuple(sfb))


def test_device_ranks_contiguous_balanced_blocks():
    for n_dev in range(1, 8):
        for nproc in range(1, n_dev + 1):
            m = device_ranks(n_dev, nproc)
            assert m == sorted(m) and set(m) == set(range(nproc))
            sizes = [m.count(r) for r in range(nproc)]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError):
        device_ranks(2, 3)


def test_rank_rows_sum_devices_of_a_rank():
    assert rank_rows((5, 1, 4, 2), [0, 0, 1, 1], 2) == (6, 6)
    assert rank_rows((0, 3, 0, 9), [0, 0, 0, 1], 2) == (3, 9)


def _owner(rows, row):
    """Brute force: which device holds global row `row` under row map `rows`."""
    acc = 0
    for d, n in enumerate(rows):
        if acc <= row < acc + n:
            return d
        acc += n
    raise AssertionError


@pytest.mark.parametrize("nproc", [4, 2, 3])
def test_transfers_deliver_every_missing_row_once(nproc):
    graph = toy_graph(12)
    maps = [(3, 3, 3, 3), (5, 1, 4, 2), (12, 0, 0, 0), (0, 0, 12, 0), (4, 0, 8, 0), (0, 7, 0, 5)]
    for combo in itertools.islice(itertools.product(maps, repeat=4), 0, None, 37):
        strat = Strategy(tuple(D(r) for r in combo))
        s = build_schedule(graph, TOY_GROUPS, strat, MACHINES, nproc)
        dev_rank = device_ranks(4, nproc)
        rr = [rank_rows(r, dev_rank, nproc) for r in combo]
        for c, io in enumerate(s.groups):
            for t, p in io.act_inputs:
                trs = [x for x in s.transfers[c] if x.tensor == t]
                if graph.tensors[t].batch_axis is None:  # W3t: whole, to consumer ranks the producer lacks
                    lacking = {r for r in range(nproc) if rr[c][r] and not rr[p][r]}
                    assert {x.dst for x in trs} == lacking and all(x.whole for x in trs)
                    continue
                got = {}
                for x in trs:
                    for row in range(x.start, x.start + x.rows):
                        assert row not in got
                        got[row] = (x.src, x.dst)
                for row in range(12):
                    src, dst = _owner(rr[p], row), _owner(rr[c], row)
                    if src == dst:
                        assert row not in got
                    else:
                        assert got[row] == (src, dst)


def test_buckets_union_of_users_ps_server_and_tied_weight():
    graph = toy_graph(12)
    strat = Strategy((D((6, 6, 0, 0), "ring"), D((0, 0, 12, 0)), D((3, 3, 3, 3), "ps", server=3),
                      D((4, 0, 8, 0), "leader")))
    s = build_schedule(graph, TOY_GROUPS, strat, MACHINES)
    by_param = {p: b for b in s.buckets for p in b.params}
    # W1 is used by group 0 (devices 0, 1) and group 3 (devices 0, 2): summed over the union, group 0's method
    assert by_param["W1"].ranks == (0, 1, 2) and by_param["W1"].method == "ring"
    assert by_param["b1"].ranks == (0, 1) and "W3" in by_param  # W3 is read by group 0's Transpose
    assert "W2" not in by_param  # group 1 runs on one device: nothing to sync
    assert by_param["W4"].method == "leader" and by_param["W4"].ranks == (0, 2)
    assert s.param_users["W2"] == (2,)


def test_ps_server_outside_replicas_joins_the_bucket():
    graph = toy_graph(12)
    strat = Strategy((D((12, 0, 0, 0)), D((6, 6, 0, 0), "ps", server=3), D((12, 0, 0, 0)), D((12, 0, 0, 0))))
    s = build_schedule(graph, TOY_GROUPS, strat, MACHINES)
    (b,) = [b for b in s.buckets if "W2" in b.params]
    assert b.method == "ps" and b.server == 3 and b.ranks == (0, 1, 3)


def test_sfb_replaces_the_weights_ring_sum():
    graph = toy_graph(12)
    strat = Strategy((D((3, 3, 3, 3), "ring"), D((5, 0, 4, 3), "ring", sfb=["m2"]),
                      D((3, 3, 3, 3), "ring"), D((2, 5, 5, 0), "ring", sfb=["g4"])))
    s = build_schedule(graph, TOY_GROUPS, strat, MACHINES)
    assert {(o.param, o.ranks) for o in s.sfb} == {("W2", (0, 2, 3)), ("W4", (0, 1, 2))}
    synced = {p for b in s.buckets for p in b.params}
    assert "W2" not in synced and "W4" not in synced and "b4" in synced


@pytest.mark.parametrize("group,op,why", [(0, "r1", "Gemm or MatMul"), (3, "g5", "no other op uses"),
                                          (0, "m2", "an op of group 0"), (0, "nope", "an op of group 0")])
def test_sfb_entries_the_runtime_cannot_run_are_input_errors(group, op, why):
    graph = toy_graph(12)
    decs = [D((3, 3, 3, 3), "ring") for _ in range(4)]
    decs[group] = D((3, 3, 3, 3), "ring", sfb=[op])
    with pytest.raises(InputError) as e:
        build_schedule(graph, TOY_GROUPS, Strategy(tuple(decs)), MACHINES, plan_file="p.json")
    assert str(e.value).startswith(f"p.json: decisions[{group}].sfb[0]: expected") and why in str(e.value)


def test_shape_tensors_are_recomputed_not_sent():
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    path = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "gpt2_tiny.onnx")
    graph = load_model(path, batch_size=8)
    groups = [list(g.op_ids) for g in coarsen(graph, k=4, n_devices=4).groups]
    strat = Strategy(tuple(D((4, 4, 0, 0)) for _ in groups))
    s = build_schedule(graph, groups, strat, MACHINES)
    for io in s.groups:
        for t, _ in io.act_inputs:  # only float activations cross groups in gpt2
            assert graph.tensors[t].dtype == "float32"
        for i in io.recompute:
            assert graph.ops[i].op_type in ("Shape", "Squeeze", "Gather", "Unsqueeze", "Concat", "Mul", "Cast",
                                            "Div", "Add", "Sub", "Slice", "Reshape")
    assert any(io.recompute for io in s.groups)
    # the batch size read off input_ids is a shape closure rooted at a Shape op
    sym = [t for io in s.groups for i in io.recompute for t in graph.ops[i].outputs]
    assert shape_closure(graph, sym[-1])[0] in [i for io in s.groups for i in io.recompute]
    assert shape_closure(graph, graph.outputs[0]) is None

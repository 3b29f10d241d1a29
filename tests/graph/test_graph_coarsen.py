"""Coarsening on hand-made OpGraphs: invariants, exact small cases, and the DP against brute force."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from coarsen_checks import check_group_graph, make_graph, random_dag_graph
from tag.errors import InputError
from tag.graph.coarsen import atom_weights, atoms_of, coarsen, default_group_count
from tag.graph.coarsen_partition import min_bottleneck, partition_1d


def chain(n, flops=None):
    flops = flops or [10.0] * n
    specs = [(f"op{i}", ["x" if i == 0 else f"t{i-1}"], [f"t{i}"], {"fwd_flops_per_row": flops[i]})
             for i in range(n)]
    return make_graph(specs)


def test_two_ops_two_groups_one_op_each():
    gg = coarsen(chain(2), k=2)
    assert [g.op_ids for g in gg.groups] == [[0], [1]]
    assert len(gg.edges) == 1
    e = gg.edges[0]
    assert (e.src, e.dst, e.tensors, e.bytes_per_row, e.bytes_fixed) == (0, 1, ["t0"], 16.0, 0.0)
    assert gg.groups[0].out_bytes_per_row == 16.0 and gg.groups[1].out_bytes_per_row == 0.0


def test_chain_balanced_exactly():
    # 8 equal ops into 4 groups: the only min-max partition is pairs
    gg = coarsen(chain(8), k=4)
    assert [g.op_ids for g in gg.groups] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_cut_prefers_small_tensor():
    # op1 -> op2 carries a tiny unbatched tensor; every other cut carries 16 B/row x 8 rows
    specs = [("op0", ["x"], ["t0"], {"fwd_flops_per_row": 10.0}),
             ("op1", ["t0"], ["a_shape"], {"fwd_flops_per_row": 10.0}),
             ("op2", ["a_shape"], ["t2"], {"fwd_flops_per_row": 10.0}),
             ("op3", ["t2"], ["t3"], {"fwd_flops_per_row": 10.0})]
    gg = coarsen(make_graph(specs), k=2)
    assert [g.op_ids for g in gg.groups] == [[0, 1], [2, 3]]
    assert gg.edges[0].bytes_fixed == 16.0 and gg.edges[0].bytes_per_row == 0.0


def test_weight_generators_and_shape_ops_ride_with_consumer():
    specs = [("gen_w", [], ["w"], {"is_weight_generator": True, "batched": False}),
             ("shape", ["x"], ["s_shape"], {"batched": False, "op_class": "shape"}),
             ("op0", ["x", "w"], ["t0"], {"fwd_flops_per_row": 10.0, "param_count": 4, "param_bytes": 16.0}),
             ("op1", ["t0", "s_shape"], ["t1"], {"fwd_flops_per_row": 10.0})]
    g = make_graph(specs, params=("w",))
    assert default_group_count(g, 8) == 2  # only two ops can head a group
    gg = coarsen(g, k=4)  # capped by the two atoms
    assert [g.op_ids for g in gg.groups] == [[0, 2], [1, 3]]
    assert gg.groups[0].params == ["w"] and gg.groups[0].param_bytes == 16.0
    assert gg.shared_params == {}


def test_tied_parameter_owned_by_first_consumer():
    specs = [("emb", ["x", "w"], ["t0"], {"fwd_flops_per_row": 10.0, "param_count": 4, "param_bytes": 16.0}),
             ("mid", ["t0"], ["t1"], {"fwd_flops_per_row": 10.0}),
             ("head", ["t1", "w"], ["t2"], {"fwd_flops_per_row": 10.0})]
    gg = coarsen(make_graph(specs, params=("w",)), k=3)
    check_group_graph(gg, 3)
    assert gg.groups[0].params == ["w"] and gg.groups[2].params == []
    assert gg.shared_params == {"w": [0, 2]}
    assert sum(g.param_count for g in gg.groups) == 4


def test_parallel_branches_stay_connected():
    # x -> a; a -> b1..b4 (parallel, 1 op each); join; three ops after. Every group must be connected.
    specs = [("a", ["x"], ["ta"], {"fwd_flops_per_row": 10.0})]
    specs += [(f"b{i}", ["ta"], [f"tb{i}"], {"fwd_flops_per_row": 10.0}) for i in range(4)]
    specs += [("join", [f"tb{i}" for i in range(4)], ["tj"], {"fwd_flops_per_row": 10.0})]
    specs += [(f"c{i}", ["tj" if i == 0 else f"tc{i-1}"], [f"tc{i}"], {"fwd_flops_per_row": 10.0})
              for i in range(3)]
    g = make_graph(specs)
    for k in range(1, 10):
        check_group_graph(coarsen(g, k=k), k)


def test_splittability_marked_per_group():
    specs = [("op0", ["x"], ["t0"], {"fwd_flops_per_row": 10.0}),
             ("op1", ["t0"], ["t1"], {"fwd_flops_per_row": 10.0, "splittable": False}),
             ("op2", ["t1"], ["t2"], {"fwd_flops_per_row": 10.0}),
             ("op3", ["t2"], ["t3"], {"fwd_flops_per_row": 10.0})]
    gg = coarsen(make_graph(specs), k=2)
    assert [g.splittable for g in gg.groups] == [False, True]


def test_group_figures_are_sums_of_ops():
    g = random_dag_graph(3, 60)
    gg = coarsen(g, k=7)
    for field in ("fwd_flops_per_row", "bwd_flops_per_row", "saved_bytes_per_row", "param_bytes"):
        for grp in gg.groups:
            assert getattr(grp, field) == pytest.approx(sum(getattr(g.ops[i], field) for i in grp.op_ids))
        assert sum(getattr(x, field) for x in gg.groups) == pytest.approx(sum(getattr(o, field) for o in g.ops))
    assert sorted(p for grp in gg.groups for p in grp.params) == sorted(g.param_names)


@pytest.mark.parametrize("seed", range(12))
def test_random_dags_invariants_balance_determinism(seed):
    rng = random.Random(seed)
    n, fanin = rng.randint(20, 150), rng.randint(1, 4)
    g = random_dag_graph(seed, n, max_fanin=fanin)
    k = rng.randint(2, 24)
    gg = coarsen(g, k=k)
    check_group_graph(gg, k)
    # balance: stated factor 2 over max(ideal share, heaviest atom) on the combined weight
    atom = atoms_of(g)
    w = atom_weights(g, atom, max(atom) + 1)
    group_w = [sum(w[a] for a in {atom[i] for i in grp.op_ids}) for grp in gg.groups]
    assert max(group_w) <= 2.0 * max(w.sum() / k, w.max()) + 1e-9
    again = coarsen(random_dag_graph(seed, n, max_fanin=fanin), k=k)
    assert [x.op_ids for x in again.groups] == [x.op_ids for x in gg.groups]


def test_bad_k_is_input_error():
    with pytest.raises(InputError):
        coarsen(chain(3), k=0)


def test_default_group_count_rules():
    g = chain(400)
    assert default_group_count(g, 1) == 30  # round(1.5 * sqrt(400))
    assert default_group_count(g, 40) == 80  # 2 x devices wins
    assert default_group_count(g, 64) == 128
    assert default_group_count(g, 65) == 128  # the device rule stops at 128 groups
    assert default_group_count(g, 1024) == 128
    assert default_group_count(chain(100), 1024) == 100  # never more than the ops
    assert default_group_count(chain(5), 4) == 5  # never more than the ops
    assert default_group_count(chain(5000), 1) == 48


def _brute_partition(w, c, k, cap):
    n = len(w)
    best = None
    for cuts in itertools.combinations(range(1, n), k - 1):
        starts = [0, *cuts, n]
        if max(sum(w[starts[s]:starts[s + 1]]) for s in range(k)) > cap + 1e-9:
            continue
        cost = sum(c[i] for i in cuts)
        if best is None or cost < best - 1e-12:
            best = cost
    return best


@pytest.mark.parametrize("seed", range(30))
def test_partition_1d_and_bottleneck_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 10))
    k = int(rng.integers(1, n + 1))
    w = rng.integers(0, 6, size=n).astype(float)
    c = rng.integers(0, 9, size=n).astype(float)
    brute_c = min(max(sum(w[s[i]:s[i + 1]]) for i in range(k))
                  for cuts in itertools.combinations(range(1, n), k - 1) for s in [[0, *cuts, n]])
    assert min_bottleneck(w, k) == pytest.approx(brute_c, abs=1e-6)
    cap = brute_c + float(rng.integers(0, 4))
    starts = partition_1d(w, c, k, cap)
    assert starts[0] == 0 and len(starts) == k and starts == sorted(set(starts))
    bounds = starts + [n]
    assert max(sum(w[bounds[s]:bounds[s + 1]]) for s in range(k)) <= cap + 1e-9
    assert sum(c[i] for i in starts[1:]) == pytest.approx(_brute_partition(w, c, k, cap))


@pytest.mark.parametrize("seed", range(8))
def test_branchy_graphs_connected_acyclic_balanced(seed):
    from coarsen_checks import branchy_graph
    g = branchy_graph(seed, 3 + seed)
    atom = atoms_of(g)
    w = atom_weights(g, atom, max(atom) + 1)
    for k in (2, 5, 9, 16):
        gg = coarsen(g, k=k)
        check_group_graph(gg, k)
        group_w = [sum(w[a] for a in {atom[i] for i in grp.op_ids}) for grp in gg.groups]
        assert max(group_w) <= 2.0 * max(w.sum() / k, w.max()) + 1e-9


def _cut_bytes_per_row(gg):
    """Independent cut: each activation tensor counts once per consuming group other than its producer's."""
    g = gg.graph
    gid = gg.group_of_op()
    return sum(t.bytes_per_row(g.file_batch) * len({gid[c] for c in t.consumers} - {gid[t.producer]})
               for t in g.tensors.values() if t.producer is not None and t.role != "param")


@pytest.mark.parametrize("seed", range(6))
def test_refinement_never_cuts_more_and_keeps_invariants(seed):
    from coarsen_checks import branchy_graph
    g = branchy_graph(seed, 12) if seed % 2 else random_dag_graph(seed, 200, 4)
    for k in (4, 11, 20):
        plain, refined = coarsen(g, k=k, refine=False), coarsen(g, k=k)
        check_group_graph(refined, k)
        assert _cut_bytes_per_row(refined) <= _cut_bytes_per_row(plain) + 1e-9
        assert _cut_bytes_per_row(refined) == pytest.approx(sum(e.bytes_per_row for e in refined.edges))


def test_refinement_moves_atom_to_cheaper_side():
    # a -> b (big tensor) and b -> c (small): with k=2 and a heavy c, refinement must keep a and b together
    specs = [("a", ["x"], ["ta"], {"fwd_flops_per_row": 10.0}),
             ("b", ["ta"], ["b_shape"], {"fwd_flops_per_row": 10.0}),
             ("c", ["b_shape"], ["tc"], {"fwd_flops_per_row": 10.0})]
    gg = coarsen(make_graph(specs), k=2)
    assert [grp.op_ids for grp in gg.groups] == [[0, 1], [2]]


def test_free_batched_op_joins_its_consumer():
    # an Identity with no FLOPs between two real ops must not become a group even with k = #ops
    specs = [("op0", ["x"], ["t0"], {"fwd_flops_per_row": 10.0}),
             ("ident", ["t0"], ["t1"], {"op_type": "Identity"}),
             ("op2", ["t1"], ["t2"], {"fwd_flops_per_row": 10.0})]
    gg = coarsen(make_graph(specs), k=3)
    assert [grp.op_ids for grp in gg.groups] == [[0], [1, 2]]


def test_group_report_rows():
    from tag.graph.coarsen_report import TABLE_HEADERS, group_table, groups_json
    specs = [("emb", ["x", "w"], ["t0"], {"fwd_flops_per_row": 2e9, "param_count": 4, "param_bytes": 3e6}),
             ("mid", ["t0"], ["t1"], {"fwd_flops_per_row": 2e9}),
             ("head", ["t1", "t0", "w"], ["t2"], {"fwd_flops_per_row": 2e9})]
    gg = coarsen(make_graph(specs, params=("w",)), k=3)
    js = groups_json(gg)
    assert [d["preds"] for d in js] == [[], [0], [0, 1]]
    assert [d["ops"] for d in js] == [["emb"], ["mid"], ["head"]]
    assert js[2]["shared_params_used"] == ["w"] and js[0]["params"] == ["w"]
    rows, headers = group_table(gg)
    assert headers == TABLE_HEADERS and len(rows) == 3
    assert rows[0][5] == "2.000" and rows[0][6] == "3.00" and rows[2][9] == "0,1"
    assert rows[0][8] == "0.0"  # 2 edges x 16 B/row = 32 B/row -> "0.0" KB

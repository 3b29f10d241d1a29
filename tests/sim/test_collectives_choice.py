"""NCCL's double binary tree shape, and the choice of algorithm by cost (tree for small messages on many machines,
ring or hierarchical for large ones, as NCCL's tuner picks)."""

from __future__ import annotations

import math

import pytest

from simkit_builders import make_cluster
from tag.sim.algorithms import algorithm_ms, candidates, choose_algorithm
from tag.sim.collectives import btree_parent, double_tree_parents
from tag.topology.cluster import DeviceType

CPU = DeviceType("TestCPU", peak_tflops=0.1, memory_gb=16.0, memory_bandwidth_gbps=100.0, kind="cpu")


def _children(parents):
    out = {i: [] for i in range(len(parents))}
    for i, p in enumerate(parents):
        if p >= 0:
            out[p].append(i)
    return {i: sorted(c) for i, c in out.items()}


def test_trees_match_the_pictures_in_nccl_trees_cc():
    # the 14-rank binary tree drawn in NVIDIA/nccl src/graph/trees.cc
    kids = _children([btree_parent(r, 14) for r in range(14)])
    assert kids[0] == [8] and kids[8] == [4, 12] and kids[4] == [2, 6] and kids[12] == [10, 13]
    assert kids[2] == [1, 3] and kids[6] == [5, 7] and kids[10] == [9, 11]
    # its mirror for 12 ranks: root 11 -> 3; 3 -> 1, 7; 1 -> 0, 2; 7 -> 5, 9; 5 -> 4, 6; 9 -> 8, 10
    second = _children(double_tree_parents(12)[1])
    assert second[11] == [3] and second[3] == [1, 7] and second[1] == [0, 2]
    assert second[7] == [5, 9] and second[5] == [4, 6] and second[9] == [8, 10]
    # and the shifted one for 13 ranks: root 1 -> 9; 9 -> 5, 0; 5 -> 3, 7; 0 -> 11
    shifted = _children(double_tree_parents(13)[1])
    assert shifted[1] == [9] and shifted[9] == [0, 5] and shifted[5] == [3, 7] and shifted[0] == [11]


@pytest.mark.parametrize("n", range(1, 41))
def test_both_trees_span_every_rank_and_are_log_deep(n):
    for parents in double_tree_parents(n):
        assert sum(p < 0 for p in parents) == 1
        for r in range(n):  # every rank reaches the root without a cycle, within ceil(log2 n) + 1 levels
            seen, node = 0, r
            while parents[node] >= 0:
                node, seen = parents[node], seen + 1
                assert seen <= n
            assert seen <= math.ceil(math.log2(n)) + 1 if n > 1 else seen == 0
        assert all(len(c) <= 2 for c in _children(parents).values())
    if n % 2 == 0:  # mirror trees: no rank has children in both trees
        a, b = (_children(p) for p in double_tree_parents(n))
        assert not any(a[r] and b[r] for r in range(n))


NODES64 = make_cluster([1] * 64, intra_gbps=1000.0, nic_gbps=100.0)
DGX8x8 = make_cluster([8] * 8, intra_gbps=1000.0, nic_gbps=100.0)


def test_tree_for_small_messages_on_many_machines_ring_for_large():
    devs = tuple(range(64))
    # 64 KiB: the ring pays 126 x 10 us = 1.26 ms; the tree 2 x 6 levels x (10 + 14) us = 0.288 ms
    assert choose_algorithm(NODES64, devs, 65536.0) == "tree"
    # 256 MiB: the ring moves 2 x 63/64 x S through each NIC, the tree 2 S at 0.92 of the rate
    assert choose_algorithm(NODES64, devs, 256 * 2**20) == "ring"
    assert candidates(NODES64, devs) == ("ring", "tree")  # one device per machine: no hierarchical


def test_hierarchical_for_large_messages_on_machines_of_eight():
    devs = tuple(range(64))
    # 256 MiB: the ring puts 2 x 63/64 x S through a NIC, hierarchical 2 x 7/8 x S
    assert choose_algorithm(DGX8x8, devs, 256 * 2**20) == "hierarchical"
    assert candidates(DGX8x8, devs) == ("ring", "tree", "hierarchical")


def test_ring_inside_one_machine():
    devs = tuple(range(8))
    assert candidates(DGX8x8, devs) == ("ring", "tree")
    for nbytes in (4096.0, 256 * 2**20):
        assert choose_algorithm(DGX8x8, devs, nbytes) == "ring"


def test_choice_is_the_cheapest_and_ties_go_to_ring():
    for nbytes in (1e3, 1e5, 1e7, 1e9):
        for cl, devs in ((NODES64, tuple(range(0, 64, 3))), (DGX8x8, tuple(range(0, 64, 5)))):
            got = choose_algorithm(cl, devs, nbytes)
            times = {m: algorithm_ms(m, cl, devs, nbytes) for m in candidates(cl, devs)}
            assert times[got] == min(times.values())
    # nothing to move on two CPUs of two machines: ring 2 steps of 10 us, tree one step up and one down: a tie
    two = make_cluster([1, 1], dtype=CPU)
    assert algorithm_ms("ring", two, (0, 1), 0.0) == pytest.approx(algorithm_ms("tree", two, (0, 1), 0.0))
    assert choose_algorithm(two, (0, 1), 0.0) == "ring"

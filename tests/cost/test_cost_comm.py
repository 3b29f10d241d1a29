"""Communication formulas against hand arithmetic."""

import pytest

from tag.cost import comm


def test_p2p_and_collectives():
    # 8 Gbit/s = 1e6 bytes per ms
    assert comm.p2p_ms(2e6, 8.0, 10.0) == pytest.approx(2.0 + 0.01)
    assert comm.ring_allreduce_ms(4e6, 4, 8.0, 10.0) == pytest.approx(1.5 * 4.0 + 6 * 0.01)
    assert comm.ring_allreduce_ms(4e6, 1, 8.0, 10.0) == 0.0
    assert comm.allgather_ms(4e6, 4, 8.0, 10.0) == pytest.approx(0.75 * 4.0 + 3 * 0.01)
    assert comm.chain_ms(4e6, 4, 8.0, 10.0) == pytest.approx(4.0 + 3 * 0.01)
    assert comm.ps_ms(1e6, 3, 8.0, 10.0) == pytest.approx(2 * (3 * 1.0 + 0.01))
    # leader, 2 x 4: chain in 80G machines twice + ring of 2 leaders at 8G
    assert comm.leader_allreduce_ms(8e6, 2, 4, 80.0, 2.0, 8.0, 10.0) == pytest.approx(
        2 * (0.8 + 3 * 0.002) + (8.0 + 2 * 0.01))


def test_hierarchical_tree_and_reduce_scatter_by_hand():
    # hierarchical, 2 machines x 4 at 80G (1e7 B/ms) inside, 8G (1e6 B/ms) across:
    # reduce-scatter and all-gather of 8 MB in 4: 6 MB at 1e7 B/ms + 3 x 2 us = 0.606 ms each;
    # 4 rings of 2 MB across 2 machines through one NIC: 4 x 2 MB at 1e6 B/ms = 8 ms, + 2 x 10 us
    assert comm.hierarchical_allreduce_ms(8e6, 2, 4, 80.0, 2.0, 8.0, 10.0) == pytest.approx(0.606 * 2 + 8.02)
    # 4 machines x 4: the 4 rings carry 2 x 3/4 x 2 MB = 3 MB each, 12 MB through each NIC: 12 ms + 6 x 10 us
    assert comm.hierarchical_allreduce_ms(8e6, 4, 4, 80.0, 2.0, 8.0, 10.0) == pytest.approx(0.606 * 2 + 12.06)
    # one machine: only the intra reduce-scatter and all-gather
    assert comm.hierarchical_allreduce_ms(8e6, 1, 4, 80.0, 2.0, 8.0, 10.0) == pytest.approx(1.212)
    # tree: 4 hops of 1 MB on the busiest link at 1e6 B/ms, 30 us up and 30 us down
    assert comm.tree_allreduce_ms(2e6, 4, 8.0, 30.0) == pytest.approx(4.0 + 0.06)
    # reduce-scatter: the hop out of device i carries every share but its own
    assert comm.reduce_scatter_volume_bytes(12.0, [0.5, 0.25, 0.25]) == pytest.approx(9.0)
    assert comm.reduce_scatter_volume_bytes(12.0, [1 / 3] * 3) == pytest.approx(8.0)
    assert comm.reduce_scatter_volume_bytes(12.0, [1.0]) == 0.0


def test_busbw_of_ring_formula_is_link_bandwidth_for_large_messages():
    for n in (2, 4, 8, 64):
        t = comm.ring_allreduce_ms(1e10, n, 100.0, 5.0)
        assert comm.busbw_gbps(1e10, n, t) == pytest.approx(100.0, rel=1e-3)

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
    # 2 x 4: chain in 80G machines twice + ring of 2 leaders at 8G
    assert comm.hierarchical_allreduce_ms(8e6, 2, 4, 80.0, 2.0, 8.0, 10.0) == pytest.approx(
        2 * (0.8 + 3 * 0.002) + (8.0 + 2 * 0.01))


def test_busbw_of_ring_formula_is_link_bandwidth_for_large_messages():
    for n in (2, 4, 8, 64):
        t = comm.ring_allreduce_ms(1e10, n, 100.0, 5.0)
        assert comm.busbw_gbps(1e10, n, t) == pytest.approx(100.0, rel=1e-3)

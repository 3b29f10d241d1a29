"""Alpha-beta fits recover the parameters of times made with the cost model's own formulas (tag.cost.comm)."""

import numpy as np
import pytest

from tag.cost.comm import p2p_ms, ring_allreduce_ms
from tag.profile.fit import fit_line, fit_p2p, fit_ring_allreduce

SIZES = [4, 1024, 16384, 262144, 1048576, 4194304]


def test_line_through_exact_points():
    a, b = fit_line([0.0, 10.0, 20.0], [1.0, 2.0, 3.0])
    assert a == pytest.approx(1.0) and b == pytest.approx(0.1)


def test_negative_intercept_refits_through_origin():
    a, b = fit_line([1.0, 2.0], [0.5, 1.5])  # the line would cross at -0.5
    assert a == 0.0
    # weighted (1/t) least squares through the origin by hand: b = sum(w^2 x t) / sum(w^2 x^2)
    w = np.array([1 / 0.5, 1 / 1.5])
    x, t = np.array([1.0, 2.0]), np.array([0.5, 1.5])
    assert b == pytest.approx(float(np.sum(w * w * x * t) / np.sum(w * w * x * x)))


def test_p2p_fit_recovers_latency_and_bandwidth():
    times = [p2p_ms(s, 24.0, 85.0) for s in SIZES]
    f = fit_p2p(SIZES, times)
    assert f.latency_us == pytest.approx(85.0, rel=1e-6)
    assert f.bandwidth_gbps == pytest.approx(24.0, rel=1e-6)
    assert f.max_rel_error < 1e-9


def test_p2p_fit_tolerates_noise():
    rng = np.random.default_rng(0)
    times = [p2p_ms(s, 10.0, 50.0) * (1 + rng.uniform(-0.03, 0.03)) for s in SIZES]
    f = fit_p2p(SIZES, times)
    assert f.latency_us == pytest.approx(50.0, rel=0.1)
    assert f.bandwidth_gbps == pytest.approx(10.0, rel=0.1)
    assert 0 < f.max_rel_error < 0.1


@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_allreduce_fit_gives_per_hop_figures(n):
    times = [ring_allreduce_ms(s, n, 16.0, 30.0) for s in SIZES]
    f = fit_ring_allreduce(SIZES, times, n)
    assert f.latency_us == pytest.approx(30.0, rel=1e-6)
    assert f.bandwidth_gbps == pytest.approx(16.0, rel=1e-6)


def test_p2p_fit_takes_the_rate_of_large_messages_over_bursty_middle_sizes():
    """A shaped NIC (token bucket) passes the middle sizes above its rate: the rate comes from >= 1 MiB messages
    and the latency from the 4-byte probe. By hand: 100 Mbit/s = 12,500 bytes per ms, latency 0.1 ms."""
    sizes = [4, 1024, 16384, 262144, 1 << 20, 1 << 22, 1 << 24]
    exact = [0.1 + s / 12500.0 for s in sizes]
    times = list(exact)
    times[2] = exact[2] / 3  # 16 KiB and 256 KiB in a burst at three times the rate
    times[3] = exact[3] / 3
    f = fit_p2p(sizes, times)
    assert f.bandwidth_gbps == pytest.approx(0.1, rel=1e-9)
    assert f.latency_us == pytest.approx(100.0, rel=1e-9)
    # the whole-sweep line the fit used before is pulled well above the rate by the burst
    a, b = fit_line(sizes, times)
    assert 1.0 / b / 12500.0 > 1.1

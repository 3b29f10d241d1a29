"""Measured collective rate: a cost model's `collective_hop_gbps` caps the simulator's ring collectives, and
`tag.profile.links.collective_hop_gbps` reads it off a measured topology. Expected times worked out by hand."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sim"))
from simkit_builders import FixedCost, make_cluster, make_gg  # noqa: E402
from tag.profile.links import barrier_ms, collective_hop_gbps  # noqa: E402
from tag.sim import simulate  # noqa: E402
from tag.strategy import Decision, Strategy, TrainingConfig  # noqa: E402

TC = TrainingConfig(optimizer="adam")
LAT_MS = 2 * 1e-3  # make_cluster: two 1-us device links per intra route


class _RingCost(FixedCost):
    """FixedCost plus the optional measured ring rate (Gbit/s per hop)."""

    def __init__(self, *args, ring_gbps):
        super().__init__(*args)
        self.ring_gbps = ring_gbps

    def collective_hop_gbps(self, device, n_ranks):
        return self.ring_gbps


def _one_group(n_dev: int, method: str = "allreduce"):
    gg = make_gg([dict(param_bytes=1e8, param_count=25_000_000)], [])
    rows = (4,) * n_dev
    return gg, Strategy((Decision(rows, method),))


@pytest.mark.parametrize("n_dev", [2, 4])
def test_ring_runs_at_the_measured_rate_when_slower_than_the_links(n_dev):
    gg, st = _one_group(n_dev)
    cl = make_cluster([n_dev])  # 80 Gbit/s device links
    base = FixedCost([1.0], [0.5])
    # compute: fwd 4 ms, bwd 8 ms; then the ring; then the 0.5 ms update
    vol = 2 * (n_dev - 1) / n_dev * 1e8  # per-hop bytes of a ring all-reduce
    plain = simulate(gg, cl, base, st, TC, overlap_sync=False).iteration_ms
    assert plain == pytest.approx(12 + vol / (80e9 / 8 / 1e3) + 2 * (n_dev - 1) * LAT_MS + 0.5)
    slow = simulate(gg, cl, _RingCost([1.0], [0.5], ring_gbps=20.0), st, TC, overlap_sync=False).iteration_ms
    assert slow == pytest.approx(12 + vol / (20e9 / 8 / 1e3) + 2 * (n_dev - 1) * LAT_MS + 0.5)
    # a measured rate above the links' changes nothing; neither does None
    for fast in (200.0, None):
        t = simulate(gg, cl, _RingCost([1.0], [0.5], ring_gbps=fast), st, TC, overlap_sync=False).iteration_ms
        assert t == pytest.approx(plain)


def test_ps_sync_is_point_to_point_and_not_capped():
    gg, st = _one_group(2, "ps")
    cl = make_cluster([2])
    a = simulate(gg, cl, FixedCost([1.0], [0.5]), st, TC, overlap_sync=False).iteration_ms
    b = simulate(gg, cl, _RingCost([1.0], [0.5], ring_gbps=1.0), st, TC, overlap_sync=False).iteration_ms
    assert a == pytest.approx(b)


def test_rate_read_from_a_measured_topology_ignores_small_noisy_sizes():
    # ring over 2 ranks: t = 2 alpha + S / B; B = 16 Gbit/s = 2e6 bytes/ms, alpha 0.1 ms, above 1 MiB
    sizes = [4, 1024, 1 << 20, 1 << 22, 1 << 24]
    times = [0.2, 5.0] + [0.2 + s / 2e6 for s in sizes[2:]]  # 1 KiB is an outlier (5 ms)
    topo = {"x-measured": {"sizes_bytes": sizes, "allreduce_ms": times,
                           "fits": {"allreduce": {"ranks": 2, "hop_bandwidth_gbps": 3.0}}}}
    assert collective_hop_gbps(topo) == pytest.approx(16.0, rel=1e-6)
    assert collective_hop_gbps({"version": 1}) is None  # hand-written topology: no measurement


def test_barrier_cost_is_the_smallest_measured_all_reduce():
    topo = {"x-measured": {"sizes_bytes": [1024, 4, 1 << 20], "allreduce_ms": [0.9, 0.31, 2.0]}}
    assert barrier_ms(topo) == pytest.approx(0.31)
    assert barrier_ms({"x-measured": {"sizes_bytes": [1024, 1 << 20], "allreduce_ms": [0.9, 2.0]}}) is None
    assert barrier_ms({"version": 1}) is None


class _Res:
    def __init__(self, busy, it):
        self.busy_ms, self.iteration_ms = busy, it


def test_concurrent_speed_between_alone_and_together_by_concurrency():
    from tag.cost.contention import between, concurrency

    def speed(res, alone, together):
        c, n = concurrency(res.busy_ms, res.iteration_ms, len(res.busy_ms))
        return alone if together is None else between(alone, together, c, n)

    # two devices busy 60 + 40 ms of a 100 ms iteration: one computes at a time (c = 1) -> alone figure
    assert speed(_Res({0: 60.0, 1: 40.0}, 100.0), 1.1, 1.5) == pytest.approx(1.1)
    # both busy the whole 100 ms (c = 2) -> together figure; 150 ms of 100 (c = 1.5) -> halfway
    assert speed(_Res({0: 100.0, 1: 100.0}, 100.0), 1.1, 1.5) == pytest.approx(1.5)
    assert speed(_Res({0: 100.0, 1: 50.0}, 100.0), 1.1, 1.5) == pytest.approx(1.3)
    assert speed(_Res({0: 100.0, 1: 50.0}, 100.0), 1.1, None) == pytest.approx(1.1)

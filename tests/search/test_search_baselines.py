"""Baseline builders on hand-made group graphs and clusters, against schedules worked out by hand."""

import numpy as np
import pytest

from tag.graph.groups import Group, GroupEdge, GroupGraph
from tag.search.baselines import (dp_even, even_rows, largest_remainder, proportional_rows, ps, ps_servers,
                                  replicated_strategy)
from tag.search.baselines_baechi import etf_schedule, m_etf, m_topo
from tag.strategy import TrainingConfig
from tag.topology.cluster import Cluster, Device, DeviceType, Machine


class FakeCost:
    """fwd = work[g] x rows / speed[type]; bwd = bwd_factor x fwd; update 0."""

    name = "fake"

    def __init__(self, work, speed, bwd_factor=0.0):
        self.work, self.speed, self.bwd_factor = work, speed, bwd_factor

    def group_fwd_ms(self, g, t, rows):
        return self.work[g] * rows / self.speed[t.name]

    def group_bwd_ms(self, g, t, rows):
        return self.bwd_factor * self.group_fwd_ms(g, t, rows)

    def update_ms(self, g, t):
        return 0.0


def make_cluster(memory_gb, names=None, bandwidth_gbps=8.0):
    """One machine, one device per entry; every pair at `bandwidth_gbps` (8 Gb/s = 1e6 bytes/ms), 0 latency."""
    n = len(memory_gb)
    names = names or ["T"] * n
    devs = [Device(f"m0/{i}", i, "m0", i, DeviceType(f"{names[i]}", 10.0, memory_gb[i], 1000.0)) for i in range(n)]
    bw = np.full((n, n), bandwidth_gbps)
    return Cluster("hand", devs, [Machine("m0", tuple(range(n)), bandwidth_gbps, None)], [],
                   [[() for _ in range(n)] for _ in range(n)], bw, np.zeros((n, n)))


def make_gg(k, edges=(), param_bytes=None, splittable=None, saved_fixed=None):
    groups = []
    for g in range(k):
        groups.append(Group(id=g, op_ids=[], splittable=True if splittable is None else splittable[g],
                            param_bytes=(param_bytes or [0] * k)[g], param_count=int((param_bytes or [0] * k)[g] // 4),
                            saved_bytes_fixed=(saved_fixed or [0] * k)[g]))
    return GroupGraph(graph=None, groups=groups,
                      edges=[GroupEdge(s, d, [f"t{s}{d}"], 0.0, nbytes) for s, d, nbytes in edges])


DIAMOND = [(0, 1, 1e6), (0, 2, 1e6), (1, 3, 1e6), (2, 3, 1e6)]  # every edge: 1 ms between devices


def test_etf_diamond_matches_hand_schedule():
    # times 2, 3, 3, 1 ms. By hand: g0 d0 [0,2]; g1 d0 [2,5] (d1 would start at 3, and g1 < g2 on the tie);
    # g2 d1 [3,6] (d0 free only at 5); g3 d1 [6,7] (on d0 it waits for g2's result: 6 + 1 = 7).
    gg = make_gg(4, DIAMOND)
    cost = FakeCost([2, 3, 3, 1], {"T": 1.0})
    dev, start, finish = etf_schedule(gg, make_cluster([100, 100]), cost, TrainingConfig(), 1)
    assert dev == [0, 0, 1, 1]
    assert start == pytest.approx([0, 2, 3, 6])
    assert finish == pytest.approx([2, 5, 6, 7])
    s = m_etf(gg, make_cluster([100, 100]), cost, TrainingConfig(), 1)
    assert [d.rows for d in s.decisions] == [(1, 0), (1, 0), (0, 1), (0, 1)]
    assert all(d.sync is None for d in s.decisions)


def test_etf_respects_memory():
    # every group holds 0.5 GB; d0 has 0.92 GB usable: only g0 fits there, the rest queue on d1:
    # g0 d0 [0,2]; g1 d1 [3,6]; g2 d1 [6,9]; g3 d1 [9,10].
    gg = make_gg(4, DIAMOND, saved_fixed=[0.5e9] * 4)
    cost = FakeCost([2, 3, 3, 1], {"small": 1.0, "big": 1.0})
    cl = make_cluster([1, 100], names=["small", "big"])
    dev, start, finish = etf_schedule(gg, cl, cost, TrainingConfig(), 1)
    assert dev == [0, 1, 1, 1]
    assert finish == pytest.approx([2, 6, 9, 10])


def test_m_topo_fills_devices_in_order_up_to_cap():
    gg = make_gg(4, [(0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0)], saved_fixed=[1e9] * 4)
    cost = FakeCost([1] * 4, {"T": 1.0})
    # equal devices: cap 1.1 x 4 GB / 2 = 2.2 GB -> two groups each
    s = m_topo(gg, make_cluster([100, 100]), cost, TrainingConfig(), 4)
    assert [d.devices for d in s.decisions] == [(0,), (0,), (1,), (1,)]
    # usable 1:3 -> caps 1.1 GB and 3.3 GB -> one group, then three
    s = m_topo(gg, make_cluster([100, 300]), cost, TrainingConfig(), 4)
    assert [d.devices for d in s.decisions] == [(0,), (1,), (1,), (1,)]
    assert all(sum(d.rows) == 4 for d in s.decisions)


def test_row_splitting_helpers():
    assert even_rows(10, 4) == (3, 3, 2, 2)
    assert even_rows(3, 4) == (1, 1, 1, 0)
    assert largest_remainder(10, [1, 3]) == (3, 7)  # 2.5 / 7.5: tie of remainders goes to the lower index
    assert largest_remainder(7, [1, 1, 1]) == (3, 2, 2)
    assert largest_remainder(100, [0.2, 0.5, 0.3]) == (20, 50, 30)


def test_dp_even_and_unsplittable_groups():
    gg = make_gg(3, [(0, 1, 1.0), (1, 2, 1.0)], param_bytes=[400, 0, 400], splittable=[True, True, False])
    cl = make_cluster([16] * 4)
    s = dp_even(gg, cl, FakeCost([1] * 3, {"T": 1.0}), TrainingConfig(), 10)
    assert [d.rows for d in s.decisions] == [(3, 3, 2, 2), (3, 3, 2, 2), (10, 0, 0, 0)]
    assert [d.sync for d in s.decisions] == ["auto", None, None]
    assert s.bucket_mb == 25.0  # DDP's default bucket_cap_mb


def test_ps_servers_balance_parameter_bytes():
    # by hand, largest first to the least-loaded device: g2 (300) -> d0, g3 (200) -> d1, g1 (100) -> d1 (200 < 300),
    # g4 (50) -> d0 (300 = 300, lower index)
    gg = make_gg(5, param_bytes=[0, 100, 300, 200, 50])
    assert ps_servers(gg, 2) == {2: 0, 3: 1, 1: 1, 4: 0}
    s = ps(gg, make_cluster([16, 16]), FakeCost([1] * 5, {"T": 1.0}), TrainingConfig(), 8)
    assert [(d.sync, d.server) for d in s.decisions] == [(None, None), ("ps", 1), ("ps", 0), ("ps", 1), ("ps", 0)]


def test_proportional_rows_by_hand():
    # device B is 3x faster; compute time = 3 x rows / speed (fwd + 2 x bwd).
    gg = make_gg(1)
    cost = FakeCost([1.0], {"A": 1.0, "B": 3.0}, bwd_factor=2.0)
    cl = make_cluster([16, 16], names=["A", "B"])
    assert proportional_rows(gg, cl, cost, 8) == ((2, 6), 1)  # 1:3 exactly, times 6 and 6
    # batch 10: 2.5 / 7.5 rounds to (3, 7) -> times 9 vs 7; moving a row gives (2, 8): 6 vs 8, the optimum
    rows, host = proportional_rows(gg, cl, cost, 10)
    assert rows == (2, 8)
    brute = min(range(11), key=lambda a: max(3 * a, 10 - a))
    assert rows[0] == brute


def test_replicated_strategy_host_takes_unsplittable():
    gg = make_gg(2, [(0, 1, 1.0)], param_bytes=[8, 8], splittable=[True, False])
    s = replicated_strategy(gg, (1, 5, 2), "hierarchical", host=1)
    assert [d.rows for d in s.decisions] == [(1, 5, 2), (0, 8, 0)]
    assert [d.sync for d in s.decisions] == ["hierarchical", None]


def test_single_device_skips_the_fast_device_that_does_not_fit():
    # each group keeps 1 GB for backward: 3 GB in all. "fast" (4x) has 2 GB (1.84 usable): OOM by simulation;
    # "mid" (2x, 8 GB) is next by predicted time and fits: 3 groups x 4 rows / 2 = 6 ms.
    from tag.search.baselines import single_device
    from tag.sim import simulate

    gg = make_gg(3, [(0, 1, 1.0), (1, 2, 1.0)], saved_fixed=[1e9] * 3)
    cl = make_cluster([2, 16, 8], names=["fast", "slow", "mid"])
    cost = FakeCost([1, 1, 1], {"fast": 4.0, "slow": 1.0, "mid": 2.0})
    s = single_device(gg, cl, cost, TrainingConfig(), 4)
    assert [d.rows for d in s.decisions] == [(0, 0, 4)] * 3
    res = simulate(gg, cl, cost, s, TrainingConfig())
    assert not res.oom and res.iteration_ms == pytest.approx(6.0)


def test_dp_proportional_chooses_collectives_by_cost():
    from tag.search.baselines import dp_proportional

    gg = make_gg(2, [(0, 1, 1.0)], param_bytes=[400, 0])
    cl = make_cluster([16, 16], names=["A", "B"])
    s = dp_proportional(gg, cl, FakeCost([1.0, 1.0], {"A": 1.0, "B": 3.0}, bwd_factor=2.0), TrainingConfig(), 8)
    assert [d.rows for d in s.decisions] == [(2, 6), (2, 6)]
    assert [d.sync for d in s.decisions] == ["auto", None]


def test_proportional_rows_reach_the_brute_force_min_max():
    """Linear per-row times on 3 devices: the split's slowest device equals the best over all splits."""
    import itertools
    import random

    rnd = random.Random(7)
    gg = make_gg(1)
    cl = make_cluster([16, 16, 16], names=["A", "B", "C"])
    for _ in range(40):
        speed = {n: rnd.choice([1.0, 1.5, 2.0, 3.0, 5.0]) for n in "ABC"}
        batch = rnd.randint(1, 24)
        cost = FakeCost([1.0], speed)
        rows, _ = proportional_rows(gg, cl, cost, batch)
        assert sum(rows) == batch and min(rows) >= 0
        per_row = [1.0 / speed[n] for n in "ABC"]
        got = max(r * c for r, c in zip(rows, per_row))
        best = min(max(a * per_row[0], b * per_row[1], (batch - a - b) * per_row[2])
                   for a, b in itertools.product(range(batch + 1), repeat=2) if a + b <= batch)
        assert got == pytest.approx(best), (speed, batch, rows)

"""Simulator timelines against numbers worked out by hand (see each test's comments)."""

import math

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig

TC = TrainingConfig(optimizer="adam")
INTRA_BPMS = 80e9 / 8 / 1e3  # 80 Gbit/s in bytes per ms = 1e7
NIC_BPMS = 8e9 / 8 / 1e3  # 1e6
INTRA_LAT_MS = 2 * 1e-3  # two 1-us device links
INTER_LAT_MS = (1 + 4 + 4 + 1) * 1e-3


def test_one_device_iteration_is_sum_of_tasks():
    cl = make_cluster([1])
    gg = make_gg([dict(param_bytes=100, param_count=25), dict(), dict(param_bytes=40, param_count=10)],
                 [(0, 1, 8.0, 0.0), (1, 2, 8.0, 0.0)])
    cost = FixedCost([1.0, 2.0, 3.0], [0.5, 0.0, 0.25])
    st = Strategy(tuple(Decision((4,)) for _ in range(3)))
    r = simulate(gg, cl, cost, st, TC)
    expected = 4 * (1 + 2 + 3) + 2 * 4 * (1 + 2 + 3) + 0.5 + 0.25
    assert r.iteration_ms == pytest.approx(expected)
    assert r.busy_ms["m0/0"] == pytest.approx(expected)
    assert r.samples_per_s == pytest.approx(4 / (expected / 1e3))
    assert r.link_bytes == {} and not r.oom


def _dp_one_group(sync, server=None, nbytes=4e6):
    cl = make_cluster([2])
    gg = make_gg([dict(param_bytes=nbytes, param_count=int(nbytes / 4))], [])
    st = Strategy((Decision((4, 4), sync=sync, server=server),))
    return simulate(gg, cl, FixedCost([1.0], [0.1]), st, TC)


def test_dp_even_allreduce_is_compute_plus_ring_formula():
    r = _dp_one_group("allreduce")
    n, S = 2, 4e6
    ring = 2 * (n - 1) / n * S / INTRA_BPMS + 2 * (n - 1) * INTRA_LAT_MS
    assert r.iteration_ms == pytest.approx(4 * 1.0 + 8 * 1.0 + ring + 0.1)
    # the ring puts 2(n-1)/n x S on each direction of each device link
    assert r.link_bytes["m0/0->m0"] == pytest.approx(S) and r.link_bytes["m0->m0/1"] == pytest.approx(S)


def test_dp_even_ps_is_push_plus_pull():
    r = _dp_one_group("ps", server=0)
    S = 4e6
    push = S / INTRA_BPMS + INTRA_LAT_MS
    pull = S / INTRA_BPMS + INTRA_LAT_MS
    assert r.iteration_ms == pytest.approx(12.0 + push + pull + 0.1)
    assert r.link_bytes["m0/1->m0"] == pytest.approx(S)  # push from the worker
    assert r.link_bytes["m0->m0/1"] == pytest.approx(S)  # pull back


def test_sync_overlaps_backward_and_syncs_queue_per_device_set():
    # fwd0 0-4, fwd1 4-8, bwd1 8-16, bwd0 16-24 on both devices. sync1 (1e8 B) runs 16 -> 26.004 while
    # bwd0 computes; sync0 is ready at 24 but waits for sync1 (same device set): 26.004 -> 26.408.
    # then one optimizer step per device (0.1 + 0.1): 26.408 -> 26.608.
    cl = make_cluster([2])
    gg = make_gg([dict(param_bytes=4e6, param_count=1_000_000), dict(param_bytes=1e8, param_count=25_000_000)],
                 [(0, 1, 10.0, 0.0)])
    st = Strategy((Decision((4, 4), "allreduce"), Decision((4, 4), "allreduce")))
    big = make_cluster([2])
    r = simulate(gg, big, FixedCost([1.0, 1.0], [0.1, 0.1]), st, TC)
    sync1 = 1e8 / INTRA_BPMS + 2 * INTRA_LAT_MS
    sync0 = 4e6 / INTRA_BPMS + 2 * INTRA_LAT_MS
    assert r.iteration_ms == pytest.approx(16 + sync1 + sync0 + 0.2)
    assert r.iteration_ms < 24 + sync1 + sync0 + 0.2  # bwd0 was hidden under sync1


def test_opposite_directions_do_not_interfere():
    # groups A0 (dev0) -> A1 (dev1) and B0 (dev1) -> B1 (dev0), 8e6 bytes each way at the same time.
    cl = make_cluster([2])
    gg = make_gg([dict(), dict(), dict(), dict()], [(0, 2, 1e6, 0.0), (1, 3, 1e6, 0.0)])
    st = Strategy((Decision((8, 0)), Decision((0, 8)), Decision((0, 8)), Decision((8, 0))))
    r = simulate(gg, cl, FixedCost([0.5] * 4), st, TC)
    xfer = 8e6 / INTRA_BPMS + INTRA_LAT_MS  # alone on the link: no slowdown
    assert r.iteration_ms == pytest.approx(4 + xfer + 4 + 8 + xfer + 8)


def test_two_flows_on_one_link_share_it_max_min():
    # g0 (dev0) sends 8e6 B to g1 and 16e6 B to g2 (both on dev1) at t=4: each gets half of 1e7 B/ms
    # until the small one drains at 4 + 1.6; the big one then has the link: drains at 4 + 2.4.
    cl = make_cluster([2])
    gg = make_gg([dict(), dict(), dict()], [(0, 1, 1e6, 0.0), (0, 2, 2e6, 0.0)])
    st = Strategy((Decision((8, 0)), Decision((0, 8)), Decision((0, 8))))
    r = simulate(gg, cl, FixedCost([0.5, 0.05, 0.05]), st, TC, trace=True)
    # forward: g1 at 5.602-6.002, g2 waits its input until 6.402 -> 6.802
    # backward on dev1: g2 6.802-7.602, g1 7.602-8.402; grads 16e6 (from 7.602) and 8e6 (from 8.402):
    # alone 7.602-8.402 (8e6 sent), then both have 8e6 left at half rate -> 10.002, delivered 10.004.
    # bwd g0 (8 ms) 10.004 -> 18.004
    assert r.iteration_ms == pytest.approx(18.004)
    assert r.link_bytes["m0/0->m0"] == pytest.approx(24e6)
    assert r.link_bytes["m0->m0/0"] == pytest.approx(24e6)
    comm = [e for e in r.trace_events if e.get("cat") == "comm"]
    fwd_flows = sorted((e["ts"] + e["dur"]) / 1e3 for e in comm if e["name"].startswith("act"))
    assert fwd_flows[::2] == pytest.approx([5.6, 6.4])  # drain times on the device link, per flow


def test_two_rings_sharing_an_uplink_slow_each_other():
    # 2 machines x 2 devices; ring A over (m0/0, m1/0), ring B over (m0/1, m1/1): both cross both NICs.
    cl = make_cluster([2, 2])
    S = 1e6
    gg = make_gg([dict(param_bytes=S, param_count=250_000), dict(param_bytes=S, param_count=250_000)], [])
    both = Strategy((Decision((4, 0, 4, 0), "allreduce"), Decision((0, 4, 0, 4), "allreduce")))
    alone = Strategy((Decision((4, 0, 4, 0), "allreduce"), Decision((0, 4, 0, 4))))
    cost = FixedCost([1.0, 1.0])
    r_both = simulate(gg, cl, cost, both, TC)
    assert r_both.iteration_ms == pytest.approx(12 + 2 * S / NIC_BPMS + 2 * INTER_LAT_MS)
    gg1 = make_gg([dict(param_bytes=S, param_count=250_000), dict()], [])
    r_alone = simulate(gg1, cl, cost, alone, TC)
    assert r_alone.iteration_ms == pytest.approx(12 + S / NIC_BPMS + 2 * INTER_LAT_MS)


def test_nccl_tests_busbw_equals_bottleneck_for_large_messages():
    from tag.cost.comm import busbw_gbps
    from simkit_builders import GPU
    from tag.topology.cluster import DeviceType
    big = DeviceType("Big", 10.0, 1000.0, 8000.0)
    cl = make_cluster([1, 1, 1, 1], dtype=big)
    S = 1e9
    gg = make_gg([dict(param_bytes=S, param_count=int(S / 4))], [])
    r = simulate(gg, cl, FixedCost([0.0]), Strategy((Decision((1, 1, 1, 1), "allreduce"),)), TC)
    assert busbw_gbps(S, 4, r.iteration_ms) == pytest.approx(8.0, rel=1e-4)  # the NIC, not the 80G links
    assert GPU.memory_gb == 16.0


def test_leader_allreduce_on_2x4_by_formula():
    from tag.cost.comm import leader_allreduce_ms, ring_allreduce_ms
    cl = make_cluster([4, 4])
    S = 8e6
    gg = make_gg([dict(param_bytes=S, param_count=int(S / 4))], [])
    cost = FixedCost([0.0])
    r = simulate(gg, cl, cost, Strategy((Decision((1,) * 8, "leader"),)), TC)
    chain = S / INTRA_BPMS + 3 * INTRA_LAT_MS  # 3 hops, each 2 us
    leaders = S / NIC_BPMS + 2 * INTER_LAT_MS  # ring of 2: 2(n-1)/n = 1
    assert r.iteration_ms == pytest.approx(2 * chain + leaders)
    assert r.iteration_ms == pytest.approx(leader_allreduce_ms(S, 2, 4, 80, 2, 8, 10))
    flat = simulate(gg, cl, cost, Strategy((Decision((1,) * 8, "allreduce"),)), TC)
    # the flat ring crosses each NIC once per direction with 2 x 7/8 x S; hop latency is the inter one
    assert flat.iteration_ms == pytest.approx(ring_allreduce_ms(S, 8, 8, 10))
    assert math.isfinite(flat.iteration_ms)

"""Baechi's placers check an empty device's memory once per device type: the same placements as checking every
device (a brute-force placer written out here), with the memory checks counted by hand."""

import pytest

import tag.search.baselines_baechi as baechi
from tag.search.baselines_baechi import etf_schedule, m_topo, overflow_bytes
from tag.sim.context import sim_context
from tag.strategy import TrainingConfig
from tests.search.test_search_baselines import FakeCost, make_cluster, make_gg

CHAIN = [(g, g + 1, 1e6) for g in range(5)]
SAVED = [0.4e9, 2.5e9, 0.3e9, 1.5e9, 0.2e9, 3.5e9]  # group 5 fits nowhere, group 1 only on a big device
NAMES = ["small"] * 5 + ["big"] * 5


def cluster():
    return make_cluster([1.0] * 5 + [3.0] * 5, names=NAMES)


def brute_m_topo(gg, cl, cost, training, batch):
    """m-TOPO as its docstring states it, checking every device's memory."""
    n = cl.n_devices
    ctx = sim_context(gg, cl, cost, training)
    need = baechi.group_memory_bytes(ctx, batch).tolist()
    usable = [d.type.usable_memory_bytes for d in cl.devices]
    caps = [min(usable[d], (1 + baechi.M_TOPO_SLACK) * sum(need) * usable[d] / sum(usable)) for d in range(n)]
    used, device, cur = [0.0] * n, [-1] * gg.n_groups, 0
    for g in range(gg.n_groups):
        while cur < n and ((used[cur] > 0 and used[cur] + need[g] > caps[cur])
                           or overflow_bytes(ctx, device, g, cur, batch, usable) > 0):
            cur += 1
        dev = cur if cur < n else min(range(n), key=lambda d: (overflow_bytes(ctx, device, g, d, batch, usable), d))
        used[dev] += need[g]
        device[g] = dev
    return device


def brute_etf(gg, cl, cost, training, batch):
    """m-ETF's list schedule over every (ready group, device) pair, every memory check made."""
    n, k = cl.n_devices, gg.n_groups
    ctx = sim_context(gg, cl, cost, training)
    usable = [d.type.usable_memory_bytes for d in cl.devices]
    preds = [[e for e in gg.edges if e.dst == g] for g in range(k)]
    device, finish, free = [-1] * k, [0.0] * k, [0.0] * n
    for _ in range(k):
        best = None
        for g in [g for g in range(k) if device[g] < 0 and all(device[e.src] >= 0 for e in preds[g])]:
            for d in range(n):
                s = free[d]
                for e in preds[g]:
                    s = max(s, finish[e.src] + baechi.transfer_ms(cl, device[e.src], d, baechi.edge_bytes(e, batch)))
                t = cl.devices[d].type
                cand = (overflow_bytes(ctx, device, g, d, batch, usable),
                        (s, s + cost.group_fwd_ms(g, t, batch) + cost.group_bwd_ms(g, t, batch), g, d))
                best = cand if best is None or cand < best else best
        s, f, g, d = best[1]
        device[g], finish[g], free[d] = d, f, f
    return device


@pytest.fixture
def walks(monkeypatch):
    """(group, device) of every memory walk `placement_peak_bytes` makes with a group placed tentatively."""
    calls = []
    real = baechi.placement_peak_bytes

    def count(ctx, device, d, batch, extra=None):
        calls.append((extra, d))
        return real(ctx, device, d, batch, extra=extra)
    monkeypatch.setattr(baechi, "placement_peak_bytes", count)
    return calls


def test_m_topo_same_placement_as_checking_every_device(walks):
    gg, cl = make_gg(6, CHAIN, saved_fixed=SAVED), cluster()
    cost = FakeCost([1] * 6, {"small": 1.0, "big": 2.0})
    want = brute_m_topo(gg, cl, cost, TrainingConfig(), 1)
    walks.clear()
    got = [d.devices[0] for d in m_topo(gg, cl, cost, TrainingConfig(), 1).decisions]
    assert got == want == [0, 5, 6, 7, 8, 9]
    # group 5 overflows everywhere, so it is checked on all 10 devices (the brute force walks each device and
    # group 4's device 8, 19 walks, plus the while loop's). By hand: the 5 occupied devices 0, 5, 6, 7, 8 once each,
    # one empty small (1) and one empty big (9) device, and device 8 once more as g's predecessor's device with g
    # elsewhere: 8 walks
    on5 = [d for (extra, d) in walks if extra is not None and extra[0] == 5]
    assert len(on5) == 5 + 2 + 1
    assert sorted(set(on5)) == [0, 1, 5, 6, 7, 8, 9]


def test_etf_same_schedule_as_checking_every_device():
    gg, cl = make_gg(6, CHAIN, saved_fixed=SAVED), cluster()
    cost = FakeCost([2, 3, 3, 1, 2, 1], {"small": 1.0, "big": 1.5})
    dev, _, _ = etf_schedule(gg, cl, cost, TrainingConfig(), 1)
    assert dev == brute_etf(gg, cl, cost, TrainingConfig(), 1)

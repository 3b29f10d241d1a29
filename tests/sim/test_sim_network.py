"""Max-min fair sharing: both implementations satisfy the bottleneck characterisation and agree."""

import copy
import random

import pytest

from tag.sim.network import Flow, Network, _max_min_rates_np, _max_min_rates_py


def _random_flows(rng):
    n_links = rng.randint(2, 12)
    caps = [rng.choice([1.0, 2.0, 5.0, 10.0]) for _ in range(n_links)]
    flows = []
    for _ in range(rng.randint(1, 25)):
        ls = tuple(sorted(rng.sample(range(n_links), rng.randint(1, min(4, n_links)))))
        flows.append(Flow(ls, tuple(float(rng.randint(1, 3)) for _ in ls), 1.0, 0.0))
    return caps, flows


def _check_max_min(caps, flows):
    """Feasible, and every flow crosses a saturated link on which no flow has a higher rate."""
    load = [0.0] * len(caps)
    for f in flows:
        for l, w in zip(f.links, f.weights):
            load[l] += w * f.rate
    assert all(load[l] <= caps[l] * (1 + 1e-9) for l in range(len(caps)))
    for f in flows:
        ok = False
        for l in f.links:
            on = [g.rate for g in flows if l in g.links]
            if load[l] >= caps[l] * (1 - 1e-9) and f.rate >= max(on) * (1 - 1e-9):
                ok = True
        assert ok


@pytest.mark.parametrize("seed", range(40))
def test_both_allocations_are_max_min_fair(seed):
    caps, flows = _random_flows(random.Random(seed))
    a, b = copy.deepcopy(flows), copy.deepcopy(flows)
    _max_min_rates_py(a, caps)
    _max_min_rates_np(b, caps)
    _check_max_min(caps, a)
    _check_max_min(caps, b)
    assert [f.rate for f in a] == pytest.approx([f.rate for f in b])


def test_network_two_flows_one_link_then_full_rate():
    net = Network([10.0])
    f1, f2 = Flow((0,), (1.0,), 10.0, 0.0), Flow((0,), (1.0,), 30.0, 0.0)
    net.add(f1, 0.0)
    net.add(f2, 0.0)
    assert net.next_drain_ms() == pytest.approx(2.0)  # 10 B at 5 B/ms
    assert net.pop_drained(2.0) == [f1]
    assert net.next_drain_ms() == pytest.approx(4.0)  # 20 B left at the full 10 B/ms

"""The network's shortcuts for many flows (`tag.sim.network`): components, lone flows and incremental rates
checked against a brute-force partition and a fresh numpy filling of every flow in flight."""

from __future__ import annotations

import copy
import random

import pytest

from tag.sim.network import Flow, Network, _max_min_rates_np, link_components, max_min_rates


def _flows(rng: random.Random, n_flows: int, n_links: int) -> list[Flow]:
    out = []
    for _ in range(n_flows):
        ls = tuple(sorted(rng.sample(range(n_links), rng.randint(1, 3))))
        out.append(Flow(ls, tuple(float(rng.randint(1, 3)) for _ in ls), rng.uniform(1.0, 50.0), 0.0))
    return out


def _brute_components(flows: list[Flow]) -> list[set[int]]:
    """Flow indices grouped by repeated merging of groups that share a link (no union-find)."""
    groups = [({i}, set(f.links)) for i, f in enumerate(flows)]
    merged = True
    while merged:
        merged = False
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                if groups[a][1] & groups[b][1]:
                    groups[a] = (groups[a][0] | groups[b][0], groups[a][1] | groups[b][1])
                    del groups[b]
                    merged = True
                    break
            if merged:
                break
    return [g for g, _ in groups]


@pytest.mark.parametrize("seed", range(20))
def test_link_components_match_a_brute_force_partition(seed):
    rng = random.Random(seed)
    flows = _flows(rng, rng.randint(1, 30), rng.randint(3, 40))
    comps = link_components(flows)
    index = {id(f): i for i, f in enumerate(flows)}
    got = sorted(sorted(index[id(f)] for f in c) for c in comps)
    assert got == sorted(sorted(g) for g in _brute_components(flows))
    for c in comps:  # each component keeps the flows' order
        ids = [index[id(f)] for f in c]
        assert ids == sorted(ids)


def test_flows_on_disjoint_links_each_get_their_narrowest_link():
    # caps 10, 4, 6, 9 B/ms; flow a on links 0 (w 1) and 1 (w 2): min(10, 4/2) = 2; flow b on 2 (w 3) and 3 (w 1):
    # min(6/3, 9) = 2; flow c on nothing shared with them, link 4 alone (cap 5, w 0.5): 10
    caps = [10.0, 4.0, 6.0, 9.0, 5.0]
    a, b, c = Flow((0, 1), (1.0, 2.0), 1.0, 0.0), Flow((2, 3), (3.0, 1.0), 1.0, 0.0), Flow((4,), (0.5,), 1.0, 0.0)
    max_min_rates([a, b, c], caps)
    assert [a.rate, b.rate, c.rate] == [2.0, 2.0, 10.0]


@pytest.mark.parametrize("seed", range(12))
def test_incremental_rates_equal_a_fresh_filling_of_every_flow(seed):
    """Start and drain flows at random instants (well past `Network.SMALL` in flight, a few changing at a time, so
    the incremental path runs); after each change every flow's rate equals a numpy filling of all flows in flight."""
    rng = random.Random(1000 + seed)
    n_links = 30
    caps = [rng.choice([1.0, 2.0, 5.0, 10.0]) for _ in range(n_links)]
    net = Network(caps)
    pending = _flows(rng, 80, n_links)
    t, incremental_steps = 0.0, 0
    while pending or net.active:
        tn = net.next_drain_ms()
        if pending and (not net.active or rng.random() < 0.5):
            t = min(t + rng.uniform(0.0, 0.2), tn)
            k = rng.randint(1, 3)
            for f in pending[:k]:
                net.add(f, t)
            pending = pending[k:]
        else:
            t = tn
            net.pop_drained(t)
        if not net.active:
            continue
        net.next_drain_ms()  # recomputes the rates
        incremental_steps += net.on_link is not None  # the index is kept only on the incremental path
        fresh = [copy.copy(f) for f in net.active.values()]
        _max_min_rates_np(fresh, caps)
        assert [f.rate for f in net.active.values()] == pytest.approx([f.rate for f in fresh], rel=1e-9)
    assert incremental_steps > 0

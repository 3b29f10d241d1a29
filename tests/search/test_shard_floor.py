"""Shard candidates ruled out by the starts' floor (`tag.search.search_start._shard_candidates`): a candidate left out
is, by the simulator, no faster than the best start; the ones kept are the same strategies with the same results as
when nothing is ruled out (the LP of a strategy ruled out reads the peaks of its floor's build, which equal its
simulation's); and the evaluator's count, which budgets read, is the same."""

import math
import os
import sys

import pytest

from tag.strategy import TrainingConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_link_floor import _case, _topology  # noqa: E402


@pytest.fixture(scope="module")
def starts():
    """gpt2_tiny on tag16: search_start with the floor, and with it switched off (every floor 0)."""
    import tag.search.search_start as ss

    training = TrainingConfig()
    gg, cluster, cost, _ = _case("gpt2_tiny", _topology("tag16"), training)
    on = ss.search_start(gg, cluster, cost, training)
    mp = pytest.MonkeyPatch()
    mp.setattr(ss.StartFloor, "__call__", lambda self, s: 0.0)
    try:
        off = ss.search_start(gg, cluster, cost, training)
    finally:
        mp.undo()
    return gg, cluster, cost, training, on, off


def test_candidates_left_out_are_no_faster_than_the_best_start(starts):
    *_, on, off = starts
    left_out = set(off.sharded) - set(on.sharded)
    assert left_out  # the case rules some out (else this checks nothing)
    assert set(on.sharded) <= set(off.sharded)
    best_ms = min(r.iteration_ms for r in on.ev.cache.values() if not r.oom)  # the fastest the starts reached
    for name in left_out:
        res = off.sharded[name][1]  # simulated where nothing was ruled out
        assert res.oom or res.iteration_ms >= best_ms * (1 - 1e-12), name


def test_candidates_kept_are_the_same_and_so_is_the_count(starts):
    *_, on, off = starts
    for name, (s, r) in on.sharded.items():
        s_off, r_off = off.sharded[name]
        assert s == s_off, name  # LP shares included: from the build's peaks where the even shares were ruled out
        assert (r.iteration_ms, r.oom, r.peak_memory_gb) == (r_off.iteration_ms, r_off.oom, r_off.peak_memory_gb)
    assert (on.start_name, on.base) == (off.start_name, off.base)
    assert on.ev.simulations == off.ev.simulations  # a strategy ruled out counts as simulated
    assert on.counted[0] == off.counted[0] - on.ev.floored  # ... but is not simulated


def test_floor_and_peak_from_one_build_match_the_simulation(starts):
    """`link_floor_and_peak` against `link_floor_ms` and a simulation, on sharded and pipelined strategies."""
    from tag.search.evaluate import link_floor_and_peak, link_floor_ms
    from tag.sim import simulate
    from tag.sim.context import sim_context

    gg, cluster, cost, training, on, off = starts
    ctx = sim_context(gg, cluster, cost, on.training)
    strategies = [s for s, _ in list(off.sharded.values())[:3]] + [s for s, _ in list(on.candidates.values())[:2]]
    assert any(s.pipeline is not None for s in strategies) and any(
        any(d.shard is not None for d in s.decisions) for s in strategies)
    for s in strategies:
        floor, peak = link_floor_and_peak(ctx, s)
        assert floor == link_floor_ms(ctx, s)
        res = simulate(gg, cluster, on.cost, s, on.training)
        assert peak == res.peak_memory_gb
        assert floor <= res.fit_iteration_ms * (1 + 1e-12) or math.isinf(res.fit_iteration_ms)


def test_the_sfb_guard_spares_only_strategies_sfb_may_start_from(starts, monkeypatch):
    """With SFB still able to start from a plan that slow (`never_sfb_start` False), the floor is 0 for a strategy
    SFB may start from (a baseline) but stays for a shard candidate or a pipeline, which SFB never starts from
    (ruling them out removes no SFB start)."""
    import tag.search.search_start as ss
    from tag.search.evaluate import compute_floor_ms, link_floor_ms
    from tag.sim.context import sim_context

    gg, cluster, cost, training, on, off = starts
    monkeypatch.setattr(ss, "never_sfb_start", lambda ev, floor: False)
    ctx = sim_context(gg, cluster, on.cost, on.training)
    floor = ss.StartFloor(ctx, on.ev)
    flat = on.baselines["dp-even"][0]
    assert max(compute_floor_ms(gg, cluster, on.cost, flat), link_floor_ms(ctx, flat)) > 0
    assert floor(flat) == 0.0
    sharded = next(iter(off.sharded.values()))[0]
    piped = next(s for s, _ in on.candidates.values() if s.pipeline is not None)
    for s in (sharded, piped):
        expected = max(compute_floor_ms(gg, cluster, on.cost, s), link_floor_ms(ctx, s))
        assert expected > 0 and floor(s) == expected


def test_floors_built_on_forked_workers_equal_those_built_one_by_one(starts):
    """`StartFloor.prepare` shares the builds with a forked process: every strategy's (floor, peaks) is what the
    floor builds alone, and a second `prepare` builds nothing again."""
    import tag.search.search_start as ss
    from tag.search.prefetch import can_fork
    from tag.sim.context import sim_context

    if not can_fork():
        pytest.skip("no fork here: prepare builds one by one")
    gg, cluster, cost, training, on, off = starts
    ctx = sim_context(gg, cluster, on.cost, on.training)
    strategies = [s for s, _ in off.sharded.values()] + [s for s, _ in on.candidates.values()]
    assert len(strategies) >= 4
    shared, alone = ss.StartFloor(ctx, on.ev, workers=1), ss.StartFloor(ctx, on.ev)
    shared.prepare(strategies + strategies[:2])  # a strategy listed twice is built once
    assert set(shared._built) == set(strategies)
    for s in strategies:
        assert shared._of(s) == alone._of(s)
    built = dict(shared._built)
    shared.prepare(strategies)
    assert all(shared._built[s] is built[s] for s in strategies)

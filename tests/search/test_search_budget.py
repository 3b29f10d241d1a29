"""Search budgets count work: default counts by hand, the wall-clock cap only as a recorded safety net,
`simulations` equal to the simulator calls the search made (counted by a second method: wrapping the simulator).

A fake clock (`time.monotonic` replaced by a counter) plays a slow or loaded machine, so nothing here is timed."""

import itertools

import numpy as np

import tag.search.budget as budget
import tag.sim
from tag.search.baselines import run_baselines
from tag.search.budget import WallCap, default_counts
from tag.search.evaluate import Evaluator
from tag.search.mcts import MCTS
from tag.search.planner import plan
from tag.strategy import Strategy, TrainingConfig

from tests.search.test_search_mcts_synthetic import FakeResult, _space, _table_fn
from tests.search.test_search_plan_guarantees import FlatCost, two_wide_layers


class FakeClock:
    """time.monotonic() that advances `step` seconds on every call: a machine as slow as we like."""

    def __init__(self, step: float):
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_default_counts_by_hand():
    # 16 groups x 8 devices = 128 <= 1024: the full defaults
    assert default_counts(16, 8) == (200, 300)
    assert default_counts(32, 32) == (200, 300)  # exactly 1024
    # 128 x 64 = 8192 = 8 x 1024: an eighth of each, 200 / 8 = 25 and 300 / 8 = 37, raised to the floor 100
    assert default_counts(128, 64) == (25, 100)
    # 33 x 32 = 1056: 200 * 1024 // 1056 = 193 (204800 / 1056 = 193.9), 300 * 1024 // 1056 = 290 (290.9)
    assert default_counts(33, 32) == (193, 290)
    # 1000 x 1000: scaled far below the floors 16 and 100
    assert default_counts(1000, 1000) == (16, 100)


def test_wall_cap_is_hit_only_when_asked_past_its_deadline(monkeypatch):
    clock = FakeClock(1.0)
    monkeypatch.setattr(budget.time, "monotonic", clock)
    cap = WallCap.after(3.0)  # deadline = 1001 + 3
    assert not cap.reached() and not cap.hit  # 1002
    assert not cap.reached()  # 1003
    assert cap.reached() and cap.hit  # 1004 >= 1004
    assert WallCap.after(None).reached() is False
    assert WallCap.after(None).remaining_s(7.0) == 7.0


def _table_case():
    rng = np.random.default_rng(5)
    space = _space(rng, 3, 5)
    space.candidates = [list(dict.fromkeys(c)) for c in space.candidates]
    ms = _table_fn(rng, space)
    base = Strategy(tuple(c[0] for c in space.candidates))
    return space, ms, base


def test_mcts_stops_on_playouts_whatever_the_clock(monkeypatch):
    """A clock racing 100 s per call does not change a run whose cap is far away: same playouts, same tree."""
    space, ms, base = _table_case()
    outs = []
    for step in (0.0, 100.0):
        monkeypatch.setattr(budget.time, "monotonic", FakeClock(step))
        ev = Evaluator(lambda s: FakeResult(ms(s)), ms(base), {})
        cap = WallCap.after(1e9)
        r = MCTS(space, ev, base, seed=2).run(40, cap)
        outs.append((r.playouts, cap.hit, ev.best[1], [rec.visits.tolist() for rec in r.records]))
    assert outs[0] == outs[1] and outs[0][0] == 40 and not outs[0][1]


def test_mcts_cap_binding_is_recorded(monkeypatch):
    """With 1 s per clock call and a 10 s cap, the run stops early and says so."""
    space, ms, base = _table_case()
    monkeypatch.setattr(budget.time, "monotonic", FakeClock(1.0))
    ev = Evaluator(lambda s: FakeResult(ms(s)), ms(base), {})
    cap = WallCap.after(10.0)  # created at 1001, deadline 1011; each playout asks once: 1002 .. 1010 pass
    r = MCTS(space, ev, base, seed=2).run(40, cap)
    assert cap.hit and r.playouts == 9


def _counting_simulate(monkeypatch):
    calls = [0]
    real = tag.sim.simulate

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)
    monkeypatch.setattr(tag.sim, "simulate", counted)
    return calls


def test_plan_counts_simulations_and_is_clock_independent(monkeypatch):
    """simulations = every simulator call during plan() minus those of building the baselines (counted by
    running run_baselines alone with the same wrapper); a clock 1000x faster or slower changes nothing."""
    gg, cluster = two_wide_layers()
    training = TrainingConfig(optimizer="adam")
    calls = _counting_simulate(monkeypatch)
    run_baselines(gg, cluster, FlatCost(), training)
    baseline_calls = calls[0]
    runs = []
    for step in (1e-3, 1.0):
        monkeypatch.setattr(budget.time, "monotonic", FakeClock(step))
        calls[0] = 0
        res = plan(gg, cluster, FlatCost(), training, playouts=30, refine_simulations=60, seed=1, sfb=False,
                   budget_s=1e7)
        assert res.simulations == calls[0] - baseline_calls and res.simulations > 0
        runs.append((res.strategy, res.playouts, res.simulations, res.capped))
    assert runs[0] == runs[1] and runs[0][1] == 30 and runs[0][3] is False


def test_plan_under_a_binding_cap_says_capped(monkeypatch):
    gg, cluster = two_wide_layers()
    training = TrainingConfig(optimizer="adam")
    monkeypatch.setattr(budget.time, "monotonic", FakeClock(1.0))
    res = plan(gg, cluster, FlatCost(), training, playouts=200, refine_simulations=500, seed=1, sfb=False,
               budget_s=20.0)
    assert res.capped and res.playouts < 200
    # nothing cut short: not capped, all playouts run
    monkeypatch.setattr(budget.time, "monotonic", FakeClock(0.0))
    res = plan(gg, cluster, FlatCost(), training, playouts=20, refine_simulations=50, seed=1, sfb=False, budget_s=20.0)
    assert not res.capped and res.playouts == 20


def test_baselines_seed_the_cache_without_counting():
    """Evaluator.add ranks a result like a simulated one but does not count it."""
    ev = Evaluator(lambda s: FakeResult(5.0), 10.0, {})
    a, b = Strategy(()), Strategy((None,))
    ev.add(a, FakeResult(8.0))
    assert ev.simulations == 0 and ev.best[1] == a and abs(ev.best[0] - np.log(10 / 8)) < 1e-12
    ev.value(b)  # simulated: 5 ms, better
    assert ev.simulations == 1 and ev.best[1] == b

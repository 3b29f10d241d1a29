"""Which strategies SFB selection starts from: the searched plan and the best baseline, and, only when one of those
cannot be an SFB start (or with extra_starts > 0), the fastest other strategy the search simulated."""

from __future__ import annotations

import tag.compression
from tag.search import planner
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage

from tests.search.test_search_sfb_pipeline import _Ev, _Res


def _flat(rows, recompute=False):
    return Strategy((Decision((rows, 8 - rows), recompute=recompute), Decision((rows, 8 - rows))))


def _run(monkeypatch, best, ev, baselines, **kw):
    seen = []

    def fake_select(gg, cluster, cost, training, start, simulate_fn, time_limit_s=None, ahead_fn=None):
        seen.append(start)
        return start, {"ops": []}

    monkeypatch.setattr(tag.compression, "select_sfb", fake_select)
    planner._apply_sfb(None, None, None, None, best, ev, baselines, None, **kw)
    return seen


def test_default_starts_are_the_searched_plan_and_the_best_baseline(monkeypatch):
    best, twin, base, slow = _flat(4), _flat(4, recompute=True), _flat(2), _flat(1)
    ev = _Ev({best: _Res(10.0), twin: _Res(10.0), base: _Res(20.0), slow: _Res(30.0)})
    baselines = {"dp-even": (base, _Res(20.0)), "single-device": (slow, _Res(30.0))}
    assert _run(monkeypatch, best, ev, baselines) == [best, base]
    # one extra start: the fastest other strategy simulated (the twin at 10 ms, before the 30 ms one)
    assert _run(monkeypatch, best, ev, baselines, extra_starts=1) == [best, base, twin]


def test_a_pipelined_searched_plan_leaves_its_slot_to_the_fastest_other(monkeypatch):
    piped = Strategy((Decision((8, 0)), Decision((0, 8))),
                     pipeline=Pipeline((Stage((0,), (0,)), Stage((1,), (1,))), micro_batches=2))
    twin, base = _flat(4, recompute=True), _flat(2)
    ev = _Ev({piped: _Res(5.0), twin: _Res(10.0), base: _Res(20.0)})
    assert _run(monkeypatch, piped, ev, {"dp-even": (base, _Res(20.0))}) == [base, twin]

"""SFB selection never starts from a pipelined strategy: deploy runs sufficient factors only without
micro-batches, so a pipelined plan with SFB ops could be planned but not deployed."""

from __future__ import annotations

from dataclasses import dataclass, field

import tag.compression
from tag.search import planner
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage


@dataclass
class _Res:
    iteration_ms: float
    oom: bool = False


@dataclass
class _Ev:
    """The evaluator surface `_apply_sfb` uses: cached results, a value (higher is better) and `looks_ahead`."""

    cache: dict = field(default_factory=dict)

    def value(self, s):
        return -self.cache[s].iteration_ms

    def result(self, s):
        return self.cache[s]

    looks_ahead = False  # nothing is simulated ahead here


def _piped(rows):
    pipe = Pipeline((Stage((0,), (0,)), Stage((1,), (1,))), micro_batches=2)
    return Strategy((Decision((rows, 0)), Decision((0, rows))), pipeline=pipe)


def test_pipelined_strategies_are_not_sfb_starts(monkeypatch):
    best = _piped(8)  # the fastest: 10 ms
    flat = Strategy((Decision((4, 4)), Decision((4, 4))))  # 20 ms, the only non-pipelined start
    other_piped = _piped(4)  # 15 ms
    ev = _Ev({best: _Res(10.0), other_piped: _Res(15.0), flat: _Res(20.0)})
    seen = []

    def fake_select(gg, cluster, cost, training, start, simulate_fn, time_limit_s=None, ahead_fn=None):
        seen.append(start)
        with_sfb = Strategy(tuple(Decision(d.rows, sfb=("op",)) for d in start.decisions), pipeline=start.pipeline)
        ev.cache[with_sfb] = _Res(ev.cache[start].iteration_ms - 1.0)  # SFB saves 1 ms wherever it is applied
        return with_sfb, {"ops": ["op"]}

    monkeypatch.setattr(tag.compression, "select_sfb", fake_select)
    chosen, report = planner._apply_sfb(None, None, None, None, best, ev, {"dp-even": (flat, _Res(20.0))}, None)
    assert seen == [flat]  # neither pipelined strategy was handed to SFB selection
    assert chosen is best  # 10 ms (no SFB) beats flat + SFB at 19 ms
    assert report["ops"] == [] and report["ms_saved"] == 0.0 and report["iteration_ms_with"] == 10.0

"""Refinement keeps a pipelined strategy's pipeline: every neighbour it tries (bucket caps, row moves, other
groups' decisions) and the strategy it returns carry the same stages, micro-batches and schedule.

The simulator is replaced by a scorer worked out by hand: 10 ms with a 25 MiB bucket cap, 9 ms with any other, so
the first other cap tried (0 MiB, `BUCKET_SIZES_MB[0]`) is a strict gain the refinement keeps.
"""

from __future__ import annotations

from types import SimpleNamespace

from tag.search.evaluate import Evaluator
from tag.search.refine import BUCKET_SIZES_MB, bucket_neighbours, refine
from tag.search.space import SearchSpace
from tag.strategy import Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage

PIPE = Pipeline((Stage((0,), (0, 1)), Stage((1,), (2, 3))), 4, "kfkb", 2)
DECS = (Decision((8, 8, 0, 0), "ring"), Decision((0, 0, 8, 8), "ring"))


def test_bucket_neighbours_keep_the_pipeline():
    s = Strategy(DECS, 25.0, pipeline=PIPE)
    nbs = bucket_neighbours(s)
    assert [n.bucket_mb for n in nbs] == [c for c in BUCKET_SIZES_MB if c != 25.0]
    assert all(n.pipeline == PIPE and n.decisions == DECS for n in nbs)


def test_refining_a_pipelined_strategy_keeps_its_pipeline():
    seen = []

    def fake_simulate(s: Strategy):
        seen.append(s)
        return SimpleNamespace(oom=False, iteration_ms=10.0 if s.bucket_mb == 25.0 else 9.0, peak_memory_gb={})

    ev = Evaluator(fake_simulate, 10.0, {})
    space = SearchSpace(order=[0, 1], candidates=[[DECS[0]], [DECS[1]]], has_params=[True, True],
                        splittable=[True, True])
    best = refine(space, ev, Strategy(DECS, 25.0, pipeline=PIPE), max_simulations=50)
    assert best.pipeline == PIPE and best.bucket_mb == 0.0
    assert len(seen) > 1 and all(s.pipeline == PIPE for s in seen)

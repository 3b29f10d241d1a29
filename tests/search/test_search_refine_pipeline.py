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


def test_refine_moves_rows_in_multiples_of_m_inside_the_stage():
    """Stage 0 = devices 0, 1; stage 1 = devices 2, 3; m = 4. Group 0 starts at rows (12, 4): the scorer (by hand)
    takes 10 ms + |rows[0] - rows[1]| of group 0, so the balanced (8, 8) is best and one move of m = 4 rows reaches
    it. The space also offers group 0 a decision on stage 1's devices and one with rows off a multiple of 4: the
    refinement never simulates either, nor any other strategy that breaks the pipeline."""
    from tag.search.search_start import pipeline_consistent
    from tag.search.refine import row_shift_neighbours

    pipe = Pipeline((Stage((0,), (0, 1)), Stage((1,), (2, 3))), 4, "1f1b", 1)
    decs = (Decision((12, 4, 0, 0), "ring"), Decision((0, 0, 8, 8), "ring"))
    assert [d.rows for d in row_shift_neighbours(decs[0], unit=4)] == [(8, 8, 0, 0)]  # (16, 0) would leave none
    assert [d.rows for d in row_shift_neighbours(Decision((6, 10)), unit=2)] == [(4, 12), (8, 8)]
    seen = []

    def fake_simulate(s: Strategy):
        seen.append(s)
        r = s.decisions[0].rows
        return SimpleNamespace(oom=False, iteration_ms=10.0 + abs(r[0] - r[1]), peak_memory_gb={})

    ev = Evaluator(fake_simulate, 10.0, {})
    off_stage, off_m = Decision((0, 0, 8, 8), "ring"), Decision((10, 6, 0, 0), "ring")
    space = SearchSpace(order=[0, 1], candidates=[[decs[0], off_stage, off_m], [decs[1]]], has_params=[True, True],
                        splittable=[True, True])
    best = refine(space, ev, Strategy(decs, 25.0, pipeline=pipe), max_simulations=200)
    assert best.decisions[0].rows == (8, 8, 0, 0) and best.pipeline == pipe
    assert seen and all(pipeline_consistent(s) for s in seen)
    assert not any(s.decisions[0] in (off_stage, off_m) for s in seen)

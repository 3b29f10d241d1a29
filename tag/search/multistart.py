"""Multi-start refinement: the refinement `tag plan --playouts 0` runs, which the structure tree's search runs too.

From one per-group space (`tag.search.space`, built on the best start), `refine_starts` refines

1. `first` (the best plan so far) with `refine_simulations` new simulations;
2. every other start, fastest first: each baseline (one that does not fit: its memory variant, when it has one),
   then the fastest fitting pipeline candidate and the fastest fitting shard candidate, each with
   `refine_simulations // OTHER_REFINE_SHARE` (`tag.search.budget`).

Each is strict-improvement coordinate descent (`tag.search.refine`) that stops when a sweep gains less than 0.1 %,
so a start in a different basin (placement when the tree started from data parallelism, a pipeline, a shard grid)
is improved in its own basin. The evaluator's cache makes a strategy simulated before free, so a search that has
already refined some of these starts pays only for what is new; the best-ever strategy is the evaluator's.
"""

from __future__ import annotations

import math

from tag.search.budget import OTHER_REFINE_SHARE, WallCap
from tag.search.evaluate import Evaluator
from tag.search.memory_pass import with_variants
from tag.search.refine import refine as refine_pass
from tag.search.space import SearchSpace
from tag.strategy import Strategy


def refine_starts(space: SearchSpace, ev: Evaluator, first: Strategy, *, baselines: dict, variants: dict,
                  candidates: dict, sharded: dict, skip: tuple = (), refine_simulations: int,
                  cap: WallCap | None = None) -> None:
    """Steps 1-2 of the module docstring. `baselines`, `variants`, `candidates` (pipelines), `sharded` (shard
    candidates): name -> (strategy, SimResult); `skip`: strategies (by identity) not refined in step 2 (the start
    `first` came from). A start that is `first` itself is refined again: its cached path costs nothing, so that
    refinement goes on where step 1's budget stopped it."""
    refine_pass(space, ev, first, max_simulations=refine_simulations, cap=cap)
    each = refine_simulations // OTHER_REFINE_SHARE
    starts = with_variants(baselines, variants)
    skipped = {id(s) for s in skip}
    others = [starts[name][0] for _, name in sorted((r.iteration_ms, name) for name, (_, r) in starts.items())]
    others += [s for s in (best_fitting(candidates), best_fitting(sharded)) if s is not None]
    for start in others:
        if id(start) not in skipped:
            refine_pass(space, ev, start, max_simulations=each, cap=cap)


def best_fitting(named: dict) -> Strategy | None:
    """The fastest strategy of name -> (strategy, SimResult) that fits in memory (ties: the first), or None."""
    fits = [(r.iteration_ms, i, st) for i, (st, r) in enumerate(named.values())
            if not r.oom and math.isfinite(r.iteration_ms)]
    return min(fits, key=lambda x: (x[0], x[1]))[2] if fits else None

"""MCTS with lazy priors: the same search as with priors asked at every node's build, with a forward pass only for
the nodes a playout walks through."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from tag.search.evaluate import Evaluator
from tag.search.mcts import MCTS
from tag.search.space import SearchSpace
from tag.strategy import Decision, Strategy


@dataclass
class _Res:
    iteration_ms: float
    oom: bool = False
    peak_memory_gb: dict = field(default_factory=dict)


def _space(groups: int, cands: int) -> SearchSpace:
    candidates = [[Decision((g + 1, c + 1)) for c in range(cands)] for g in range(groups)]
    return SearchSpace(order=list(range(groups)), candidates=candidates, has_params=[False] * groups,
                       splittable=[True] * groups)


def _ms(s: Strategy) -> float:
    """A fixed table: group g with candidate c costs 1 + ((7g + 3c) mod 5), plus 2 when groups 0 and 1 differ."""
    ids = [d.rows[1] - 1 for d in s.decisions]
    return float(sum(1 + (7 * g + 3 * c) % 5 for g, c in enumerate(ids)) + 2 * (ids[0] != ids[1]))


def _pure_priors(calls: list):
    """Non-uniform priors that depend only on the arguments (a hash of the state and the group)."""

    def priors(strategy: Strategy, group: int, candidates):
        calls.append((strategy, group))
        seed = zlib.crc32(repr((strategy.decisions, group)).encode())
        p = np.random.default_rng(seed).random(len(candidates)) + 0.05
        return p / p.sum(), None
    return priors


def _run(lazy: bool, playouts: int):
    space = _space(4, 4)
    base = Strategy(tuple(c[0] for c in space.candidates))
    seen: list = []
    ev = Evaluator(lambda s: (seen.append(s), _Res(_ms(s)))[1], _ms(base), {})
    calls: list = []
    tree = MCTS(space, ev, base, seed=5, priors_fn=_pure_priors(calls), lazy_priors=lazy)
    res = tree.run(playouts)
    return tree, res, seen, calls, ev


def _inner(node, depth: int) -> int:
    """Nodes of the tree above the last depth (those with candidates to choose among)."""
    return int(node.depth < depth) + sum(_inner(c, depth) for c in node.children.values())


def _walked(node) -> int:
    """Nodes of the tree a playout selected from (those with a visit below them), counted by walking it."""
    return int(node.visits.sum() > 0) + sum(_walked(c) for c in node.children.values())


def test_lazy_priors_search_the_same_tree_with_fewer_forward_passes():
    for playouts in (1, 7, 60):
        eager, r_eager, seen_eager, calls_eager, ev_eager = _run(False, playouts)
        lazy, r_lazy, seen_lazy, calls_lazy, ev_lazy = _run(True, playouts)
        assert seen_lazy == seen_eager  # the same strategies simulated, in the same order
        assert ev_lazy.best == ev_eager.best
        assert [(rec.group, rec.visits.tolist()) for rec in r_lazy.records] == \
            [(rec.group, rec.visits.tolist()) for rec in r_eager.records]
        # eager: one call per node built above the last depth (root included); lazy: one per node walked through
        assert len(calls_eager) == _inner(eager.root, 4)
        assert len(calls_lazy) == _walked(lazy.root)
        assert set(calls_lazy) <= set(calls_eager)
    assert len(calls_lazy) < len(calls_eager)  # 60 playouts: most nodes are built once and never walked through


def test_lazy_priors_without_playouts_ask_nothing():
    _, res, _, calls, _ = _run(True, 0)
    assert res.playouts == 0 and calls == []

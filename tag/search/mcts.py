"""Monte-Carlo tree search over per-group decisions (PUCT, as in AlphaZero).

A node at depth k has decided the first k groups of `SearchSpace.order`; its state is a complete strategy
(undecided groups keep the base strategy's decision). One playout walks down by PUCT,

    score(a) = Q_norm(a) + c_puct * P(a) * sqrt(N_parent) / (1 + N(a)),

expands one new node, scores its strategy with the simulator (the `Evaluator`, cached), and backs the value up.
Q is normalised to [0, 1] by the smallest and largest values seen in the tree (MuZero), so c_puct does not depend
on the scale of speedups; an unvisited action is valued at its parent's value. P comes from `priors_fn` (the GNN,
passed in by the caller) or is uniform. Ties are broken by a fixed per-node jitter drawn from the seed, so a run is
deterministic for a given seed and playout count. The best strategy ever simulated is kept by the Evaluator.

With `lazy_priors`, a node asks `priors_fn` for its priors when a playout first selects among its children, not when
it is built: most nodes of a short search are built once and never walked through, so their network forward passes
are saved. For a pure `priors_fn` (the same priors for the same arguments, whenever it is called: the GNN without
exploration noise) the search is the same, playout for playout; a `priors_fn` that draws noise from an rng would see
its calls in another order, so it is off by default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from tag.search.budget import WallCap
from tag.search.evaluate import Evaluator
from tag.search.space import SearchSpace
from tag.strategy import Decision, Strategy

# priors_fn(strategy, group_id, candidates) -> (priors over candidates summing to 1, value estimate or None)
PriorsFn = Callable[[Strategy, int, Sequence[Decision]], "tuple[np.ndarray, float | None]"]


@dataclass
class Node:
    depth: int
    strategy: Strategy
    value: float  # simulated value of this node's strategy
    prior: np.ndarray | None  # None until first needed (`lazy_priors`)
    jitter: np.ndarray
    visits: np.ndarray
    total: np.ndarray  # sum of backed-up values per action
    children: dict[int, "Node"] = field(default_factory=dict)


@dataclass
class VisitRecord:
    """A visited decision point, for training a policy on visit counts (expert iteration)."""

    strategy: Strategy
    group: int
    candidates: list[Decision]
    visits: np.ndarray


@dataclass
class MCTSResult:
    playouts: int
    best_value: float
    best_strategy: Strategy
    records: list[VisitRecord]


class MCTS:
    def __init__(self, space: SearchSpace, evaluator: Evaluator, base: Strategy, *, seed: int = 0,
                 c_puct: float = 1.25, priors_fn: PriorsFn | None = None, lazy_priors: bool = False):
        self.space = space
        self.lazy_priors = lazy_priors
        self.ev = evaluator
        self.base = base
        self.c_puct = c_puct
        self.priors_fn = priors_fn
        self.rng = np.random.default_rng(seed)
        self.q_min, self.q_max = math.inf, -math.inf
        self.root = self._make_node(0, base, evaluator.value(base))

    def _make_node(self, depth: int, strategy: Strategy, value: float) -> Node:
        self._see(value)
        k = len(self.space.candidates[self.space.order[depth]]) if depth < len(self.space.order) else 0
        prior = None if self.lazy_priors and k else self._prior(depth, strategy)
        return Node(depth, strategy, value, prior, self.rng.random(k) * 1e-9, np.zeros(k), np.zeros(k))

    def _prior(self, depth: int, strategy: Strategy) -> np.ndarray:
        """The priors over the candidates of the group decided at `depth` (`priors_fn`'s, else uniform)."""
        if depth >= len(self.space.order):
            return np.zeros(0)
        gid = self.space.order[depth]
        cands = self.space.candidates[gid]
        k = len(cands)
        if self.priors_fn is not None:
            p, _ = self.priors_fn(strategy, gid, cands)
            p = np.asarray(p, dtype=float)
            if p.shape == (k,) and np.all(np.isfinite(p)) and p.sum() > 0:
                return np.clip(p, 0, None) / np.clip(p, 0, None).sum()
        return np.full(k, 1.0 / k)

    def _see(self, v: float) -> None:
        self.q_min = min(self.q_min, v)
        self.q_max = max(self.q_max, v)

    def _norm(self, q: np.ndarray) -> np.ndarray:
        span = self.q_max - self.q_min
        if span <= 1e-12:
            return np.zeros_like(q)
        return (q - self.q_min) / span

    def _select(self, node: Node) -> int:
        if node.prior is None:
            node.prior = self._prior(node.depth, node.strategy)
        q = np.where(node.visits > 0, node.total / np.maximum(node.visits, 1), node.value)
        u = self.c_puct * node.prior * math.sqrt(node.visits.sum() + 1) / (1 + node.visits)
        return int(np.argmax(self._norm(q) + u + node.jitter))

    def playout(self) -> None:
        node, path = self.root, []
        while node.depth < len(self.space.order):
            a = self._select(node)
            path.append((node, a))
            child = node.children.get(a)
            if child is None:
                gid = self.space.order[node.depth]
                strat = node.strategy.replace(gid, self.space.candidates[gid][a])
                if self.ev.looks_ahead:
                    self._ahead(node, a)
                child = self._make_node(node.depth + 1, strat, self.ev.value(strat))
                node.children[a] = child
                value = child.value
                break
            node = child
        else:
            value = node.value
        for n, a in path:
            n.visits[a] += 1
            n.total[a] += value

    def _ahead(self, node: Node, a: int) -> None:
        """Tell the evaluator the children of `node` a later playout may expand: `a`, then the others not expanded,
        highest prior first (`Evaluator.ahead`; results and counts do not change)."""
        gid = self.space.order[node.depth]
        cands = self.space.candidates[gid]
        rest = sorted((b for b in range(len(cands)) if b != a and b not in node.children),
                      key=lambda b: (-node.prior[b], b))
        self.ev.ahead(node.strategy.replace(gid, cands[b]) for b in [a] + rest)

    def run(self, playouts: int, cap: WallCap | None = None,
            on_playout: Callable[[int, float], None] | None = None) -> MCTSResult:
        """Run `playouts` playouts, fewer only if the wall-clock safety `cap` is reached first (then `cap.hit`)."""
        done = 0
        while done < playouts and len(self.space.order):
            if cap is not None and cap.reached():
                break
            self.playout()
            done += 1
            if on_playout:
                on_playout(done, self.ev.best[0])
        best_v, best_s = self.ev.best
        return MCTSResult(done, best_v, best_s if best_s is not None else self.base, self.visit_records())

    def visit_records(self, min_visits: int = 8) -> list[VisitRecord]:
        """Decision points on the most-visited path with at least `min_visits` visits."""
        out, node = [], self.root
        while node.depth < len(self.space.order) and node.visits.sum() >= min_visits:
            gid = self.space.order[node.depth]
            out.append(VisitRecord(node.strategy, gid, list(self.space.candidates[gid]), node.visits.copy()))
            a = int(np.argmax(node.visits))
            if a not in node.children:
                break
            node = node.children[a]
        return out

"""The structure tree: Monte-Carlo tree search over whole-plan decisions (`tag.search.structure` lists them).

Depth d of the tree decides one level of a plan's structure: the plan kind, then the kind's own levels (a data or
placement layout; a pipeline's stage count, then its cuts, micro-batches and schedule), then tensor shards, ZeRO or
recomputation, and the gradient bucket cap. Every node holds a complete strategy, scored by the simulator through
the search's `Evaluator` (cached, so an action that keeps its parent's strategy costs nothing). One playout walks
down from the root by PUCT over the children a node admits,

    score(a) = Q_norm(a) + c_puct * P(a) * sqrt(N) / (1 + N(a)),

builds new nodes until one needs a new simulation (a node whose strategy the evaluator has already scored, such as
"keep" or a start, costs nothing, so the walk goes on through it) or it reaches a leaf, and backs the value up.
Q(a) is the best value found in the subtree of a (a plan is as good as the best strategy the search finds, so the
backup is a maximum, not a mean), normalised to [0, 1] between Q_WINDOW below the root's value and the largest
value seen (clipped); an action not yet built is valued at its parent's value. Progressive widening: a node visited
N times admits its first 1 + floor(PW_C * sqrt(N)) actions in prior order (the lists' own order for uniform priors:
the heuristic's best first), so long lists (layouts, pipelines, shard grids) open as the node earns visits; an
action whose build yields nothing is dropped. A subtree whose every action is built and exhausted is not walked
again; the search ends early when the whole tree is. Ties break by a fixed per-node jitter drawn from the seed:
deterministic for a seed and playout count.

Priors come from `priors_fn(strategy, level, action names) -> (priors, value or None)` (the hook a GNN over
structure actions fills; None = uniform).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from tag.search.budget import WallCap
from tag.search.evaluate import Evaluator
from tag.search.structure import COMMON_LEVELS, KIND_LEVELS, Action, Layouts
from tag.strategy import Strategy

StructurePriorsFn = Callable[[Strategy, str, Sequence[str]], "tuple[np.ndarray, float | None]"]
PW_C = 2.0  # progressive widening: a node visited N times admits 1 + floor(PW_C * sqrt(N)) actions
C_PUCT = 1.25
Q_WINDOW = 0.1  # values more than this (ln of a speedup, ~10%) below the root's normalise to 0


@dataclass
class StructureNode:
    strategy: Strategy
    value: float  # the evaluator's value of this node's strategy
    levels: tuple[str, ...]  # the levels still to decide below this node, the next first
    path: tuple[str, ...]  # action names from the root
    stages: int | None = None  # a pipeline node's stage count (the micro level's options)
    actions: list[Action] | None = None  # built on the first visit
    order: list[int] = field(default_factory=list)  # action indices in admission order (prior, then list order)
    prior: np.ndarray | None = None
    jitter: np.ndarray | None = None
    children: dict[int, "StructureNode"] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)  # actions whose build gave no strategy
    visits: int = 0
    child_visits: dict[int, int] = field(default_factory=dict)
    best: float = -math.inf  # the best value in this node's subtree
    exhausted: bool = False


@dataclass
class StructureRecord:
    """A decision point of the structure tree with its visit counts (for training structure priors)."""

    strategy: Strategy
    level: str
    actions: list[str]
    visits: np.ndarray


@dataclass
class StructureResult:
    playouts: int
    nodes: int
    best_path: tuple[str, ...]  # the actions leading to the best node
    best_strategy: Strategy
    records: list[StructureRecord]


class StructureTree:
    """`actions_for(node) -> list[Action]` is given by `structure_actions` (the levels of `tag.search.structure`)."""

    def __init__(self, root_strategy: Strategy, evaluator: Evaluator, actions_for: Callable[[StructureNode], list[Action]],
                 *, seed: int = 0, priors_fn: StructurePriorsFn | None = None, c_puct: float = C_PUCT,
                 pw_c: float = PW_C):
        self.ev, self.actions_for, self.priors_fn = evaluator, actions_for, priors_fn
        self.c_puct, self.pw_c = c_puct, pw_c
        self.rng = np.random.default_rng(seed)
        self.q_min, self.q_max = math.inf, -math.inf
        self.nodes = 1
        self.root = self._node(root_strategy, ("kind",), ())

    def _node(self, strategy: Strategy, levels: tuple[str, ...], path: tuple[str, ...],
              stages: int | None = None) -> StructureNode:
        v = self.ev.value(strategy)
        self.q_min, self.q_max = min(self.q_min, v), max(self.q_max, v)
        return StructureNode(strategy, v, levels, path, stages, best=v, exhausted=not levels)

    def _open(self, node: StructureNode) -> None:
        """The node's actions, priors and admission order, on its first visit."""
        node.actions = self.actions_for(node)
        k = len(node.actions)
        prior = None
        if self.priors_fn is not None and k:
            p, _ = self.priors_fn(node.strategy, node.levels[0], [a.name for a in node.actions])
            p = np.asarray(p, dtype=float)
            if p.shape == (k,) and np.all(np.isfinite(p)) and p.sum() > 0:
                prior = np.clip(p, 0, None) / np.clip(p, 0, None).sum()
        node.prior = prior if prior is not None else np.full(k, 1.0 / max(k, 1))
        node.order = sorted(range(k), key=lambda i: (-node.prior[i], i))
        node.jitter = self.rng.random(k) * 1e-9
        # the children the tree widens to first, in that order, simulated ahead where their strategies are known
        self.ev.ahead(node.actions[i].known for i in node.order if node.actions[i].known is not None)
        if not k:
            node.exhausted = True

    def _norm(self, q: float) -> float:
        """q on [0, 1] between Q_WINDOW below the root's value and the best value seen (clipped): differences of
        a few percent between plans that fit stay visible next to out-of-memory values far below."""
        lo = max(self.q_min, self.root.value - Q_WINDOW)
        span = self.q_max - lo
        return 0.0 if span <= 1e-12 else min(1.0, max(0.0, (q - lo) / span))

    def _select(self, node: StructureNode) -> int | None:
        """The admitted, live action with the highest PUCT score (None when every action is spent)."""
        admit = 1 + int(self.pw_c * math.sqrt(node.visits))
        live = [a for a in node.order if a not in node.dead and not (a in node.children and node.children[a].exhausted)]
        if not live:
            return None
        spent = set(live)
        cand = [a for a in node.order[:admit] if a in spent] or live[:1]  # widen past spent actions
        p_sum = sum(node.prior[a] for a in cand) or 1.0
        sq = math.sqrt(node.visits + 1)

        def score(a: int) -> float:
            child = node.children.get(a)
            q = self._norm(child.best if child is not None else node.value)
            return q + self.c_puct * node.prior[a] / p_sum * sq / (1 + node.child_visits.get(a, 0)) + node.jitter[a]
        return max(cand, key=score)

    def _child(self, node: StructureNode, a: int) -> StructureNode | None:
        action = node.actions[a]
        strategy = action.build()
        if strategy is None:
            node.dead.add(a)
            return None
        level, rest = node.levels[0], node.levels[1:]
        stages = node.stages
        if level == "kind":
            rest = KIND_LEVELS[action.name] + COMMON_LEVELS
        elif level == "stages":
            stages = int(action.name[1:])
        self.nodes += 1
        return self._node(strategy, rest, node.path + (action.name,), stages)

    def playout(self) -> bool:
        """One walk from the root (module docstring); False when the tree is exhausted."""
        node, path = self.root, []
        while True:
            if node.actions is None and not node.exhausted:
                self._open(node)
            if node.exhausted:
                break
            a = self._select(node)
            if a is None:
                node.exhausted = True
                break
            child = node.children.get(a)
            if child is None:
                sims = self.ev.simulations
                child = self._child(node, a)
                if child is None:
                    continue  # dropped: choose again at this node
                node.children[a] = child
                path.append((node, a))
                node = child
                if self.ev.simulations == sims:
                    continue  # a strategy already scored (a start, or "keep"): free, so the walk goes on
                break
            path.append((node, a))
            node = child
        value = node.best
        node.visits += 1
        for parent, a in reversed(path):
            parent.visits += 1
            parent.child_visits[a] = parent.child_visits.get(a, 0) + 1
            parent.best = max(parent.best, value)
            if parent.actions is not None and len(parent.children) + len(parent.dead) == len(parent.actions) \
                    and all(c.exhausted for c in parent.children.values()):
                parent.exhausted = True
        return bool(path) or not self.root.exhausted

    def run(self, playouts: int, cap: WallCap | None = None,
            on_playout: Callable[[int, float], None] | None = None) -> StructureResult:
        """Up to `playouts` playouts (fewer when the tree is exhausted, or the safety `cap` is reached)."""
        done = 0
        while done < playouts and not self.root.exhausted:
            if cap is not None and cap.reached():
                break
            if not self.playout():
                break
            done += 1
            if on_playout:
                on_playout(done, self.ev.best[0])
        node = self.root
        while node.children:  # the path to the best node: the child holding the subtree's best each time
            a = max(node.children, key=lambda i: (node.children[i].best, -i))
            if node.children[a].best < node.value:
                break
            node = node.children[a]
        return StructureResult(done, self.nodes, node.path, node.strategy, self.records())

    def records(self, min_visits: int = 4) -> list[StructureRecord]:
        """Decision points with at least `min_visits` visits, root first (breadth first)."""
        out, queue = [], [self.root]
        while queue:
            node = queue.pop(0)
            if node.actions and node.visits >= min_visits:
                visits = np.array([node.child_visits.get(i, 0) for i in range(len(node.actions))], dtype=float)
                out.append(StructureRecord(node.strategy, node.levels[0], [a.name for a in node.actions], visits))
            queue += [node.children[a] for a in sorted(node.children)]
        return out


def structure_actions(gg, cluster, cost, training, layouts: Layouts, shards: dict | None, result_fn):
    """actions_for(node) over `layouts` (`tag.search.structure.make_layouts`); `shards`: group id -> GroupShard
    (None or {}: no shard level actions); `result_fn`: the evaluator's cached simulation."""
    from tag.search.structure import bucket_actions, memory_actions, shard_actions

    def const(name: str, s: Strategy) -> Action:
        return Action(name, lambda: s, s)

    def actions_for(node: StructureNode) -> list[Action]:
        level = node.levels[0]
        keep = const("keep", node.strategy)
        if level == "kind":
            return [const(k, v[0][1]) for k, v in layouts.by_kind.items()]
        if level == "layout":
            kind = node.path[0]
            return [const(name, s) for name, s in layouts.by_kind[kind]]
        if level == "stages":
            return [const(f"S{s}", v[0][1]) for s, v in layouts.pipelines_by_stages.items()]
        if level == "micro":
            return [const(name, s) for name, s in layouts.pipelines_by_stages[node.stages]]
        if level == "shard":
            return [keep] + (shard_actions(gg, cluster, cost, training, node.strategy, shards, result_fn)
                             if shards else [])
        if level == "memory":
            return [keep] + memory_actions(gg, cluster, cost, training, node.strategy, result_fn)
        if level == "bucket":
            return [keep] + bucket_actions(node.strategy)
        raise ValueError(f"unknown structure level {level!r}")
    return actions_for

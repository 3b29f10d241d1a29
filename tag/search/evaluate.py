"""Scoring strategies for the search: a cached simulator call and the value the tree search backs up.

value(strategy) = ln(reference_ms / iteration_ms) for a plan that fits and is at least as fast as the
reference, the best non-OOM baseline's iteration time (so the best baseline scores 0 and a 2x faster plan
ln 2 = 0.69); a slower plan that fits scores -(1 - reference_ms / iteration_ms), in (-1, 0] (the two pieces
meet with the same slope at the reference), so every plan that fits outranks every plan that does not;
a plan that runs out of memory scores -1 - overflow, overflow in [0, 1] being the worst device's excess
over its usable memory as a fraction of it, so the search is still steered towards plans that fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Hashable

from tag.strategy import Strategy

OOM_VALUE = -1.0


@dataclass
class Evaluator:
    """Calls `simulate_fn(strategy) -> SimResult` once per distinct strategy (a transposition cache);
    `simulations` counts the distinct strategies scored (the unit of the search's budgets).

    reference_ms: the iteration time that scores 0 (best non-OOM baseline); usable_gb: per device id.
    key_fn: a canonical form, `key_fn(a) == key_fn(b)` only when a and b simulate alike (e.g. `simulation_key`:
    two bucket caps that derive the same buckets); a strategy whose key was scored before takes that result without
    calling `simulate_fn` (`alias_hits` counts them) and still counts in `simulations`, so budgets spend exactly as
    without the key and the search takes the same path.
    """

    simulate_fn: Callable[[Strategy], object]
    reference_ms: float
    usable_gb: dict[str, float]
    cache: dict[Strategy, object] = field(default_factory=dict)
    simulations: int = 0
    best: tuple[float, Strategy | None] = (-math.inf, None)  # (value, strategy) of the best ever simulated
    key_fn: Callable[[Strategy], Hashable] | None = None
    aliases: dict = field(default_factory=dict)  # key_fn(strategy) -> SimResult
    alias_hits: int = 0
    floor_fn: Callable[[Strategy], float] | None = None  # a lower bound on a strategy's iteration ms (`can_exceed`)
    floored: int = 0  # strategies `can_exceed` ruled out without simulating
    floors: dict = field(default_factory=dict)  # strategy -> its floor ms, for those ruled out (counted already)
    prefetch: Callable[[list], None] | None = None  # `tag.search.prefetch.Prefetcher.ahead` of simulate_fn's

    @property
    def looks_ahead(self) -> bool:
        """Whether `ahead` does anything (callers skip building its lists when it does not)."""
        return self.prefetch is not None

    def ahead(self, strategies) -> None:
        """Say which strategies the search will ask for next, in order, so that those not scored yet are simulated
        ahead on other cores (`prefetch`; nothing without it). Changes no result and no count. `key_fn` is not asked
        here: it is asked again when the strategy is scored, and a strategy that turns out to be an alias costs only
        a worker's time."""
        if self.prefetch is not None:
            self.prefetch([s for s in strategies if s not in self.cache and s not in self.floors])

    def can_exceed(self, strategy: Strategy, value: float,
                   floor_fn: Callable[[Strategy], float] | None = None) -> bool:
        """False when `strategy` provably scores at most `value`: the value of its `floor_fn` time (a lower bound on
        its iteration time; the argument, else the evaluator's) is at most `value` (a plan that fits scores less the
        slower it is; one that does not fit scores less than any that fits). It is then not simulated, but counts in
        `simulations` as if it had been (`floored`), so budgets spend as before and a strict-improvement search
        (`tag.search.refine`) takes the same path; scored later (asked again above its floor, or through `result`),
        it is simulated uncounted, as a cache hit. True otherwise, and for a strategy scored before, and without
        asking for a floor when `value` is one of a plan that does not fit (every finite floor scores above it)."""
        floor_fn = floor_fn if floor_fn is not None else self.floor_fn
        if floor_fn is None or strategy in self.cache or value <= OOM_VALUE:
            return True
        floor = self.floors.get(strategy)
        if floor is None:
            floor = floor_fn(strategy)
            if not self.floor_can_exceed(floor, value):
                self.floors[strategy] = floor
                self.simulations += 1
                self.floored += 1
                return False
            return True
        return self.floor_can_exceed(floor, value)

    def floor_can_exceed(self, floor_ms: float, value: float) -> bool:
        """Whether a plan that takes at least `floor_ms` (0: no floor) may score above `value`: `can_exceed`'s test,
        with nothing recorded or counted (a `value` of a plan that does not fit is exceeded by any finite floor)."""
        return value <= OOM_VALUE or floor_ms <= 0 or self._ms_value(floor_ms) > value

    def result(self, strategy: Strategy):
        res = self.cache.get(strategy)
        if res is None:
            key = self.key_fn(strategy) if self.key_fn is not None else None
            res = self.aliases.get(key) if key is not None else None
            if res is None:
                res = self.simulate_fn(strategy)
            else:
                self.alias_hits += 1
            if strategy not in self.floors:  # a floored strategy was counted when it was ruled out
                self.simulations += 1
            self.add(strategy, res, key)
        return res

    def add(self, strategy: Strategy, res, key: Hashable | None = None) -> None:
        """Cache and rank a result simulated elsewhere (the baselines); not counted in `simulations`."""
        if strategy in self.cache:
            return
        self.cache[strategy] = res
        if self.key_fn is not None:
            self.aliases.setdefault(self.key_fn(strategy) if key is None else key, res)
        # ties keep the first found, so the outcome does not depend on dict order
        if self._value(res) > self.best[0]:
            self.best = (self._value(res), strategy)

    def value(self, strategy: Strategy) -> float:
        return self._value(self.result(strategy))

    def _value(self, res) -> float:
        if res.oom or not math.isfinite(res.iteration_ms):
            worst = 0.0
            for dev, gb in res.peak_memory_gb.items():
                cap = self.usable_gb.get(dev, 0.0)
                if cap > 0 and gb > cap:
                    worst = max(worst, min(1.0, (gb - cap) / cap))
            return OOM_VALUE - worst
        return self._ms_value(res.iteration_ms)

    def _ms_value(self, iteration_ms: float) -> float:
        """The value of a plan that fits and takes `iteration_ms` (module docstring)."""
        ratio = self.reference_ms / iteration_ms
        return math.log(ratio) if ratio >= 1 else ratio - 1.0


def link_floor_ms(ctx, strategy: Strategy) -> float:
    """A lower bound on the simulated iteration time of `strategy`, any kind (pipelined, sharded, SFB): the busiest
    directed link's bytes over its capacity, max_l (sum over flows f of volume_f x w_f,l) / cap_l, over every flow
    of the simulator's task graph (`tag.sim.build`, default options: each activation and gradient transfer, each
    phase of each gradient sync). Max-min sharing never puts more than cap_l on link l, and every flow drains
    within the iteration. `ctx`: the strategy's `tag.sim.context.SimContext`. Costs one task-graph build (twins
    folded, `tag.sim.engine.build_folded`: the same flows): cheap beside the event loop of a plan whose thousands
    of concurrent flows share links (a stage placement on a 1,024-device cluster)."""
    from tag.sim.engine import build_folded

    return _link_floor_of(ctx, build_folded(ctx, strategy)[0])


def link_floor_and_peak(ctx, strategy: Strategy) -> tuple[float, dict[str, float]]:
    """(`link_floor_ms`, the peak memory per device id in 1e9 bytes that its simulation reports,
    `tag.sim.engine.peak_memory_gb`) from one task-graph build: what a search needs of a strategy it may rule out
    by the floor but whose memory it still reads (`tag.search.shard_search`'s LP)."""
    from tag.sim.engine import build_folded, peak_memory_gb

    tg = build_folded(ctx, strategy)[0]
    return _link_floor_of(ctx, tg), peak_memory_gb(ctx, strategy, tg)


def _link_floor_of(ctx, tg) -> float:
    """`link_floor_ms` of a built task graph."""
    load = [0.0] * len(ctx.cluster.links)
    specs = [t.spec for t in tg.transfers] + [f for u in tg.syncs for phase in u.phases for f in phase]
    for spec in specs:
        for l, w in zip(spec.links, spec.weights):
            load[l] += spec.volume_bytes * w
    return max((b / link.bytes_per_ms for b, link in zip(load, ctx.cluster.links) if b > 0), default=0.0)


def simulation_key(ctx, strategy: Strategy) -> tuple:
    """What a simulation of `strategy` reads of it: its decisions, its pipeline and its gradient buckets (explicit,
    or derived from the decisions and the bucket cap, `tag.sim.buckets.derive_buckets`, with the by-cost algorithms
    of `ctx`, a `tag.sim.context.SimContext`). The simulator reads the cap only through the buckets, so two caps
    that fuse the same groups (e.g. 64 and 128 MiB when no two neighbouring groups' gradients exceed 64 MiB) have
    the same key and the same result."""
    return strategy.decisions, strategy.pipeline, ctx.buckets(strategy)


def compute_floor_ms(gg, cluster, cost, strategy) -> float:
    """A lower bound on the simulated iteration time of `strategy` and of every strategy the memory pass makes of
    it (same row maps; ZeRO stages and recomputation only): max over devices d of sum over groups g of
    fwd_ms(g, d's type, rows[g][d]) + bwd_ms(same), the forward and backward tasks d's one compute stream runs
    in sequence (recomputation adds a forward, ZeRO changes no forward or backward; the optimizer step is left out,
    as ZeRO shortens it), and of every strategy with those row maps (the cap, the sync methods, SFB aside). For
    unpipelined strategies without shards; 0 for the others (no floor)."""
    if strategy.pipeline is not None or any(d.shard is not None or d.sfb for d in strategy.decisions):
        return 0.0
    types = [d.type for d in cluster.devices]
    tid = cluster.type_ids  # replicas of one type and rows cost alike
    busy = [0.0] * cluster.n_devices
    for g, dec in enumerate(strategy.decisions):
        rows, ms_of = dec.rows, {}
        for d in dec.devices:
            key = (tid[d], rows[d])
            ms = ms_of.get(key)
            if ms is None:
                ms = ms_of[key] = cost.group_fwd_ms(g, types[d], rows[d]) + cost.group_bwd_ms(g, types[d], rows[d])
            busy[d] += ms
    return max(busy, default=0.0)

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
from typing import Callable

from tag.strategy import Strategy

OOM_VALUE = -1.0


@dataclass
class Evaluator:
    """Calls `simulate_fn(strategy) -> SimResult` once per distinct strategy (a transposition cache);
    `simulations` counts those calls.

    reference_ms: the iteration time that scores 0 (best non-OOM baseline); usable_gb: per device id.
    """

    simulate_fn: Callable[[Strategy], object]
    reference_ms: float
    usable_gb: dict[str, float]
    cache: dict[Strategy, object] = field(default_factory=dict)
    simulations: int = 0
    best: tuple[float, Strategy | None] = (-math.inf, None)  # (value, strategy) of the best ever simulated

    def result(self, strategy: Strategy):
        res = self.cache.get(strategy)
        if res is None:
            res = self.simulate_fn(strategy)
            self.simulations += 1
            self.add(strategy, res)
        return res

    def add(self, strategy: Strategy, res) -> None:
        """Cache and rank a result simulated elsewhere (the baselines); not counted in `simulations`."""
        if strategy in self.cache:
            return
        self.cache[strategy] = res
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
        ratio = self.reference_ms / res.iteration_ms
        return math.log(ratio) if ratio >= 1 else ratio - 1.0

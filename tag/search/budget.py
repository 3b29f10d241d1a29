"""The search's budgets: work counts that decide the plan, and a wall-clock safety cap that only says when it bound.

The search stops on counts — tree playouts and simulations — so the same inputs, counts and seed give the same
plan on any machine under any load. `WallCap` is the safety net for inputs far larger than expected: every
phase asks `reached()` only when it still has counted work to do, so `hit` is True exactly when the cap cut
work short (and the plan says so, `search.capped`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

DEFAULT_PLAYOUTS = 200  # structure-tree playouts on instances up to SCALE_FROM group-devices
# refinement of the search's best plan, same instances (1000 before the structure tree: refinement took ~2/3 of a
# plan's time, and the structure tree now makes the moves that paid; benchmarks/ablate.md)
DEFAULT_REFINE_SIMULATIONS = 300
OTHER_REFINE_SHARE = 4  # each other baseline's refinement gets refine_simulations // OTHER_REFINE_SHARE
OTHER_STARTS_REFINED = 1  # after the structure tree, this many of the fastest other starts are refined in its best plan's space
POLISH_SHARE = 2  # the per-group tree polishes the structure tree's best with playouts // POLISH_SHARE playouts
SCALE_FROM = 1024  # groups x devices above which the default counts shrink in proportion
MIN_PLAYOUTS, MIN_REFINE_SIMULATIONS = 16, 100  # the scaled defaults never go below these
DEFAULT_BUDGET_S = 900.0  # the safety cap, seconds (benchmarks/plan_budget.md: >= 2x the slowest datasets plan, with margin)


def default_counts(n_groups: int, n_devices: int) -> tuple[int, int]:
    """(playouts, refine_simulations) the search spends by default on an instance of n_groups op groups and
    n_devices devices: DEFAULT_PLAYOUTS and DEFAULT_REFINE_SIMULATIONS when n_groups x n_devices <= SCALE_FROM,
    else both scaled by SCALE_FROM / (n_groups x n_devices) (a simulation's work grows about linearly with
    that product), rounded down, and at least MIN_PLAYOUTS and MIN_REFINE_SIMULATIONS.

    >>> default_counts(16, 8), default_counts(128, 64)
    ((200, 300), (25, 100))
    """
    size = max(1, n_groups * n_devices)
    if size <= SCALE_FROM:
        return DEFAULT_PLAYOUTS, DEFAULT_REFINE_SIMULATIONS
    return (max(MIN_PLAYOUTS, DEFAULT_PLAYOUTS * SCALE_FROM // size),
            max(MIN_REFINE_SIMULATIONS, DEFAULT_REFINE_SIMULATIONS * SCALE_FROM // size))


@dataclass
class WallCap:
    """A wall-clock deadline (`time.monotonic()` seconds; None: no cap) and whether it has cut work short."""

    deadline: float | None
    hit: bool = False

    @classmethod
    def after(cls, seconds: float | None) -> "WallCap":
        return cls(None if seconds is None else time.monotonic() + seconds)

    def reached(self) -> bool:
        """Call only with work left to do: True (and `hit` from then on) once the deadline has passed."""
        if not self.hit and self.deadline is not None and time.monotonic() >= self.deadline:
            self.hit = True
        return self.hit

    def remaining_s(self, default: float) -> float:
        """Seconds left before the deadline (`default` without a cap): the time limit of a step that has its own
        (a solver), after which the caller calls `reached()` to record whether that limit bound."""
        return default if self.deadline is None else max(0.0, self.deadline - time.monotonic())

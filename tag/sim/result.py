"""The result of simulating one training iteration (plain data)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class SimResult:
    """One simulated iteration.

    iteration_ms is inf (and samples_per_s 0) when any device runs out of memory, so an OOM strategy
    never looks preferable; `fit_iteration_ms` keeps the time the iteration would take ignoring memory.
    peak_memory_gb: device id -> peak bytes / 1e9; busy_ms: device id -> compute-stream busy time;
    link_bytes: "src->dst" (one direction of a link) -> bytes crossing it.
    """

    iteration_ms: float
    samples_per_s: float
    oom: bool
    oom_devices: list[str]
    peak_memory_gb: dict[str, float]
    busy_ms: dict[str, float]
    link_bytes: dict[str, float]
    trace_events: list[dict] = field(default_factory=list)
    fit_iteration_ms: float = 0.0
    batch_size: int = 0
    cost_model: str = ""

    def to_json(self) -> dict:
        """The DESIGN.md keys (iteration_ms is null when infinite) plus busy time and link bytes."""
        it = self.iteration_ms if math.isfinite(self.iteration_ms) else None
        return {
            "iteration_ms": it,
            "samples_per_s": self.samples_per_s,
            "oom": self.oom,
            "oom_devices": list(self.oom_devices),
            "peak_memory_gb": dict(self.peak_memory_gb),
            "busy_ms": dict(self.busy_ms),
            "link_bytes": dict(self.link_bytes),
            "fit_iteration_ms": self.fit_iteration_ms,
            "batch_size": self.batch_size,
            "cost_model": self.cost_model,
        }

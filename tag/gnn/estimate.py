"""The critical-path estimate the GNN's value head reads: `tag.sim.critical_path` (computed on the simulator's
own task graph), re-exported under the names the GNN code uses."""

from tag.sim.critical_path import Estimate, estimate

__all__ = ["Estimate", "estimate"]

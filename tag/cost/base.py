"""The interface every cost model offers to the simulator, baselines and search.

A cost model answers, for one GroupGraph and one TrainingConfig, how long a group's forward and
backward take on a device type for a number of rows, and how long the optimizer update of the
group's parameters takes. Communication times come from the cluster's routes (`tag/cost/comm.py`).
"""

from __future__ import annotations

from typing import Protocol

from tag.topology.cluster import DeviceType


class CostModel(Protocol):
    name: str  # "roofline" or "profile:<name>", recorded in plan.json predicted.cost_model

    def group_fwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Forward time of group `group_id` for `rows` batch rows on one device of this type, ms."""

    def group_bwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Backward time (input and weight gradients), ms."""

    def update_ms(self, group_id: int, device: DeviceType) -> float:
        """Optimizer update of the group's parameters on one replica, ms."""

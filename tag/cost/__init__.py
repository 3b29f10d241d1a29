"""Compute-time and communication-time models and the profile database.

`RooflineCostModel` (roofline per op), `ProfileCostModel` (measured op times, roofline fallback),
`make_cost_model` to pick one, `comm` for every communication formula.
"""

from __future__ import annotations

from tag.cost import comm
from tag.cost.base import CostModel
from tag.cost.profiled import ProfileCostModel
from tag.cost.roofline import RooflineCostModel


def make_cost_model(gg, training, profile: str | None = None, collective_gbps: float | None = None,
                    collective_step_us: float | None = None) -> CostModel:
    """The cost model for a GroupGraph: profile-backed when `profile` (a path) is given, else roofline. A profile set
    (`tag.cost.profile_db.load_all`: one profile per device type) gives one profile-backed model per type.

    `collective_gbps`: the measured per-hop rate of ring collectives (`tag.profile.links.collective_hop_gbps`
    of a topology written by `tag profile links`) and `collective_step_us` their per-step latency
    (`tag.profile.links.collective_step_us`); only the profile-backed model uses them."""
    if profile:
        from tag.cost.profile_db import load_all
        from tag.cost.profiled import MultiProfileCostModel

        models = [ProfileCostModel(gg, training, db, collective_gbps=collective_gbps,
                                   collective_step_us=collective_step_us) for db in load_all(profile)]
        if len(models) == 1:
            return models[0]
        return MultiProfileCostModel(gg, training, {m.db.device_type: m for m in models})  # a profile set
    return RooflineCostModel(gg, training)


__all__ = ["CostModel", "RooflineCostModel", "ProfileCostModel", "make_cost_model", "comm"]

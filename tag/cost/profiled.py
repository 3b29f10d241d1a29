"""A cost model backed by a profile database, falling back to the roofline per op.

For a device whose type is the profile's ``device_type``, each compute op of a group whose signature
(`tag.cost.profile_db.op_signature`) is in the profile takes the interpolated measured time; every other
op, every other device type, and the optimizer update use the roofline (`RooflineCostModel`).

`compute_scale` (default 1) multiplies every compute and update time: the sustained slowdown of a
device shared with other tenants (wall time / thread CPU time of compute between waits), which short
profiled calls do not see. `benchmarks/fidelity.py` measures it under the load it measures steps at.
"""

from __future__ import annotations

from tag.cost.profile_db import ProfileDB, interpolate, op_signature
from tag.cost.roofline import RooflineCostModel
from tag.graph.groups import GroupGraph
from tag.strategy import TrainingConfig
from tag.topology.cluster import DeviceType


class ProfileCostModel:
    """Measured op times where the profile has them, roofline elsewhere (implements `CostModel`)."""

    def __init__(self, gg: GroupGraph, training: TrainingConfig, db: ProfileDB, compute_scale: float = 1.0):
        self.gg = gg
        self.compute_scale = float(compute_scale)
        self.training = training
        self.db = db
        self.name = f"profile:{db.name}"
        self.roofline = RooflineCostModel(gg, training)
        ops = gg.graph.ops
        # Per group: positions (within the group's compute ops) with a profile entry, and the entries.
        self._hits = []
        for ids in self.roofline.compute_ops:
            hits = []
            for pos, i in enumerate(ids):
                prof = db.ops.get(op_signature(ops[i], gg.graph))
                if prof is not None:
                    hits.append((pos, prof))
            self._hits.append(hits)
        self.matched_ops = sum(len(h) for h in self._hits)
        self._cache: dict[tuple, float] = {}

    def _phase_ms(self, gid: int, device: DeviceType, rows: int, phase: str) -> float:
        hits = self._hits[gid]
        if device.name != self.db.device_type or not hits or rows <= 0:
            return self.compute_scale * self.roofline._phase_ms(gid, device, rows, phase)
        key = (phase, gid, device.name, rows)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        per_op = self.roofline.op_ms(gid, device, rows, phase)
        for pos, prof in hits:
            series = prof.fwd_ms if phase == "fwd" else prof.bwd_ms
            if series is not None:
                per_op[pos] = interpolate(prof.rows, series, rows)
        t = self.compute_scale * float(per_op.sum())
        self._cache[key] = t
        return t

    def group_fwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Forward time of a group, ms (measured ops interpolated in rows, others roofline)."""
        return self._phase_ms(group_id, device, rows, "fwd")

    def group_bwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Backward time of a group, ms (measured ops interpolated in rows, others roofline)."""
        return self._phase_ms(group_id, device, rows, "bwd")

    def update_ms(self, group_id: int, device: DeviceType) -> float:
        """Optimizer update of the group's parameters on one replica (roofline), ms."""
        return self.compute_scale * self.roofline.update_ms(group_id, device)


class MultiProfileCostModel:
    """One `ProfileCostModel` per device type (e.g. emulated devices, each profiled under its own CPU quota).

    A device type with a model of its own uses it; any other uses `fallback` (roofline by default).
    """

    def __init__(self, gg: GroupGraph, training: TrainingConfig, by_type: dict[str, ProfileCostModel],
                 fallback=None):
        self.gg, self.training, self.by_type = gg, training, dict(by_type)
        self.fallback = fallback or RooflineCostModel(gg, training)
        self.name = "profile:" + "+".join(m.db.name for m in self.by_type.values())

    def _model(self, device: DeviceType):
        return self.by_type.get(device.name, self.fallback)

    def group_fwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Forward time of a group on `device`, ms (that device type's profile)."""
        return self._model(device).group_fwd_ms(group_id, device, rows)

    def group_bwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Backward time of a group on `device`, ms (that device type's profile)."""
        return self._model(device).group_bwd_ms(group_id, device, rows)

    def update_ms(self, group_id: int, device: DeviceType) -> float:
        """Optimizer update of the group's parameters on one replica of `device`'s type, ms."""
        return self._model(device).update_ms(group_id, device)

"""A cost model backed by a profile database, falling back to the roofline per op.

For a device whose type is the profile's ``device_type``, each compute op of a group whose signature
(`tag.cost.profile_db.op_signature`) is in the profile takes the interpolated measured time; every other
op and every other device type use the roofline (`RooflineCostModel`). Every measured series is first made
non-decreasing in rows (or bytes) by its least-squares fit (`tag.cost.profile_fit`): noise at sub-millisecond
times must not make more rows cheaper.

When the profile has a ``step`` block (the deploy runtime's step, `tag.profile.step`), what the runtime does
beyond the ops is charged too (`step_terms`, the one place of these formulas):

* **compute in the step**: op o of step group G at r rows takes
  ``step_G(r) x op_o(r) / sum_{o' in G} op_o'(r)`` (the group's in-step time shared by the ops' own
  figures), and its backward also carries its share of the rest of the step (``other_ms``: freeing the
  step's tensors, zeroing gradients), ``other(r) x bwd_o(r) / sum of every op's in-step bwd(r)``;
* **optimizer update**: parameter p of step group G takes
  ``U_step x (u_G / sum_G' u_G') x bytes_p / bytes_G`` (u_G: G's update timed alone; U_step: the update
  timed in the step, median over row counts), the roofline for parameters the step did not see;
* **sync copies** (`sync_copy_ms`): the runtime's memory work around a bucket's collective (zeroing its
  flat buffer, adding the gradients into it; profiles older than that: flatten and copy-back), interpolated
  in the bucket's bytes.

`collective_gbps` (optional, default None): the measured per-hop rate of the collective library's ring
(`tag.profile.links.collective_hop_gbps` of a measured topology); the simulator caps ring collectives at it
(`collective_hop_gbps`; `tag.sim.collectives`). None keeps the links' own rate. `collective_step_us` likewise: the
measured per-step latency of its collectives (`tag.profile.links.collective_step_us`), a floor on each step's.
`collective_call_ms`: the profile's measured cost of one collective call after compute (``contention.call_ms``), a
floor on each call's latency on CPU ranks (`tag.sim.cpu_calls`); None without it.

**CPU quota** (`tag.cost.profile_types.quota_scale`): a profile taken on the thread clock under a CFS quota of q < 1 cores
(``cpu_quota_cores``, `tag.profile.quota`) holds the work, not the wall it takes; on the profile's device type every
compute, update and sync-copy time is divided by q (a one-thread rank runs at most q of the wall).

`compute_scale` (default 1) multiplies every compute and update time: the contention of a plan's ranks computing at
once on a shared machine (`tag.cost.contention.compute_scale` from the profile's ``contention`` block, applied by
`tag.cost.contention.deployed_step_ms` through `scaled`).
"""

from __future__ import annotations

import copy
import statistics

import numpy as np

from tag.cost.profile_db import ProfileDB, interpolate, op_signature, quota_scale
from tag.cost.profile_fit import monotone_db
from tag.cost.roofline import RooflineCostModel, ops_mask
from tag.graph.groups import GroupGraph
from tag.strategy import TrainingConfig
from tag.topology.cluster import DeviceType


class ProfileCostModel:
    """Measured op times where the profile has them, roofline elsewhere (implements `CostModel`)."""

    def __init__(self, gg: GroupGraph, training: TrainingConfig, db: ProfileDB, compute_scale: float = 1.0,
                 collective_gbps: float | None = None, collective_step_us: float | None = None):
        self.gg = gg
        self.collective_gbps = None if collective_gbps is None else float(collective_gbps)
        self.step_us = None if collective_step_us is None else float(collective_step_us)
        self.compute_scale = float(compute_scale)
        self.training = training
        self.db = db = monotone_db(db)  # every size series non-decreasing (`tag.cost.profile_fit`); the caller's is kept
        self.quota_scale = quota_scale(db.cpu_quota_cores)
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
        self._step_ops, self._param_upd_ms = step_terms(gg.graph, db)
        # Per group: positions (within the group's compute ops) with in-step series, and the series.
        self._step_hits = [[(pos, self._step_ops[i]) for pos, i in enumerate(ids) if i in self._step_ops]
                           for ids in self.roofline.compute_ops]

    @property
    def contention(self):
        """The profile's `tag.cost.contention.ContentionTerms` (None when it has no ``contention`` block)."""
        return self.db.contention

    def scaled(self, factor: float) -> "ProfileCostModel":
        """This model with every compute, update and sync-copy time multiplied by `factor` (a copy)."""
        out = copy.copy(self)
        out.compute_scale = self.compute_scale * float(factor)
        out._cache = {}
        return out

    def _k(self, device: DeviceType) -> float:
        """The factor on a compute, update or copy time on `device`: `compute_scale`, and on the profile's device
        type also its `quota_scale`."""
        return self.compute_scale * (self.quota_scale if device.name == self.db.device_type else 1.0)

    def _phase_ms(self, gid: int, device: DeviceType, rows: int, phase: str) -> float:
        hits = self._hits[gid]
        if device.name != self.db.device_type or not (hits or self._step_hits[gid]) or rows <= 0:
            return self._k(device) * self.roofline._phase_ms(gid, device, rows, phase)
        key = (phase, gid, device.name, rows)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        t = self._k(device) * float(self._per_op_ms(gid, device, rows, phase).sum())
        self._cache[key] = t
        return t

    def _per_op_ms(self, gid: int, device: DeviceType, rows: int, phase: str, share: float = 1.0):
        """Per compute op of the group: the profile's time where it has the op (interpolated in rows), the
        roofline's elsewhere, ms (before `compute_scale`). `share` < 1: on that fraction of each op's width (a
        tensor shard's slice), read as the measured op at share x rows rows (the same FLOPs; the per-call
        overhead stays whole) and as the roofline's `op_ms` at that share."""
        hits = self._hits[gid]
        per_op = self.roofline.op_ms(gid, device, rows, phase, share)
        at = share * rows
        for pos, prof in hits:
            series = prof.fwd_ms if phase == "fwd" else prof.bwd_ms
            if series is not None:
                per_op[pos] = interpolate(prof.rows, series, at)
        for pos, (step_rows, fwd, bwd) in self._step_hits[gid]:
            per_op[pos] = interpolate(step_rows, fwd if phase == "fwd" else bwd, at)
        return per_op

    def ops_ms(self, gid: int, device: DeviceType, rows: int, phase: str, op_ids, share: float = 1.0) -> float:
        """The part of the group's phase time that the ops `op_ids` (graph indices) take, ms (their per-op
        times, as `_phase_ms` sums them all); with `share` < 1 on that fraction of their width (`_per_op_ms`)."""
        if device.name != self.db.device_type or not (self._hits[gid] or self._step_hits[gid]) or rows <= 0:
            return self._k(device) * self.roofline.ops_ms(gid, device, rows, phase, op_ids, share)
        mask = ops_mask(self.roofline.compute_ops[gid], op_ids)
        return self._k(device) * float(self._per_op_ms(gid, device, rows, phase, share)[mask].sum())

    def launch_floor_ms(self, gid: int, device: DeviceType) -> float:
        """A floor on the group's forward (and backward) on `device` at any rows or share, ms: the roofline's
        launches (`RooflineCostModel.launch_floor_ms`) of the ops the profile does not measure, 0 for those it
        does (interpolated series may fall towards 0 at small rows)."""
        per_op = self.roofline.op_ms(gid, device, 1, "fwd", 0.0)
        if device.name == self.db.device_type:
            for pos, _ in self._hits[gid]:
                per_op[pos] = 0.0
            for pos, _ in self._step_hits[gid]:
                per_op[pos] = 0.0
        return self._k(device) * float(per_op.sum())

    def group_fwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Forward time of a group, ms (measured ops interpolated in rows, others roofline)."""
        return self._phase_ms(group_id, device, rows, "fwd")

    def group_bwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Backward time of a group, ms (measured ops interpolated in rows, others roofline)."""
        return self._phase_ms(group_id, device, rows, "bwd")

    def update_ms(self, group_id: int, device: DeviceType) -> float:
        """Optimizer update of the group's parameters on one replica, ms: the step profile's per-parameter
        figures where it has them (same device type and optimizer), the roofline otherwise."""
        roof = self.roofline.update_ms(group_id, device)
        params = self.gg.groups[group_id].params
        if device.name != self.db.device_type or not self._param_upd_ms or not params:
            return self._k(device) * roof
        if self.db.step.optimizer != self.training.optimizer:
            return self._k(device) * roof
        known = [p for p in params if p in self._param_upd_ms]
        t = sum(self._param_upd_ms[p] for p in known)
        if len(known) < len(params):  # parameters the step profile did not see: their share of the roofline
            g = self.gg.groups[group_id]
            missing = sum(_param_bytes(self.gg.graph, p) for p in params if p not in self._param_upd_ms)
            t += roof * missing / max(g.param_bytes, 1.0)
        return self._k(device) * t

    def collective_hop_gbps(self, device: DeviceType, n_ranks: int) -> float | None:
        """Measured per-hop rate (10^9 bit/s) of a ring collective over `n_ranks` ranks of `device`'s type
        (`collective_gbps` for the profile's device type; None otherwise: the links' rate applies)."""
        return self.collective_gbps if device.name == self.db.device_type else None

    def collective_step_us(self, device: DeviceType, n_ranks: int) -> float | None:
        """Measured per-step latency (us) of a collective over `n_ranks` ranks of `device`'s type (as
        `collective_hop_gbps`)."""
        return self.step_us if device.name == self.db.device_type else None

    def collective_call_ms(self, device: DeviceType) -> dict | None:
        """{call kind: ms of one small collective call after compute} on ranks of `device`'s type (the profile's
        ``contention.call_ms``, `tag.sim.cpu_calls`; None for other types or a profile without it)."""
        terms = self.db.contention
        if device.name != self.db.device_type or terms is None or not terms.call_ms:
            return None
        return dict(terms.call_ms)

    def sync_copy_ms(self, device: DeviceType, nbytes: float) -> tuple[float, float]:
        """(copy-in ms, copy-out ms) of a gradient sync of `nbytes` on one replica: the runtime's memory work
        on the bucket before the collective and after it (the step profile's figures; else (0, 0))."""
        st = self.db.step
        if device.name != self.db.device_type or st is None or not st.copy_bytes or nbytes <= 0:
            return 0.0, 0.0
        k = self._k(device)
        return (k * interpolate(st.copy_bytes, st.copy_in_ms, nbytes),
                k * interpolate(st.copy_bytes, st.copy_out_ms, nbytes))

    def fresh_fill_ms(self, device: DeviceType, nbytes: float) -> float:
        """A fresh zeroed buffer of `nbytes` on one replica, ms: the step profile's ``fill_ms`` interpolated in bytes
        (what ZeRO's CPU runtime allocates every step, `tag.sim.zero.zero_fill_ms`); 0 without it."""
        st = self.db.step
        if device.name != self.db.device_type or st is None or not st.fill_ms or nbytes <= 0:
            return 0.0
        return self._k(device) * interpolate(st.copy_bytes, st.fill_ms, nbytes)


def _param_bytes(graph, name: str) -> float:
    t = graph.tensors.get(name)
    return float(t.numel * t.itemsize) if t is not None and t.numel is not None else 0.0


def step_terms(graph, db: ProfileDB) -> tuple[dict[int, tuple[list[int], list[float], list[float]]], dict[str, float]]:
    """From a profile's ``step`` block: (op index -> (rows, in-step fwd ms, in-step bwd ms per row count),
    parameter name -> optimizer update ms), by the formulas of the module docstring; ({}, {}) without one.

    Op figures are the profile's per-op series read at the step's row counts (roofline-free: an op the
    profile lacks counts 0 in its group's sum; a group whose ops sum to 0 shares its time evenly).
    """
    st = db.step
    if st is None or not st.groups:
        return {}, {}
    by_name = {op.name: i for i, op in enumerate(graph.ops)}
    rows = list(st.rows)
    fwd: dict[int, np.ndarray] = {}
    bwd: dict[int, np.ndarray] = {}
    for g in st.groups:
        ids = [by_name[n] for n in g.ops if n in by_name]
        if len(ids) != len(g.ops):
            continue  # the profile was taken on another model
        for phase, step_ms, out in (("fwd", g.fwd_ms, fwd), ("bwd", g.bwd_ms, bwd)):
            own = np.array([[_op_ms(db, graph, i, phase, r) for r in rows] for i in ids])  # ops x rows
            total = own.sum(axis=0)
            share = np.where(total > 0, own / np.where(total > 0, total, 1.0), 1.0 / len(ids))
            for i, sh in zip(ids, share):
                out[i] = sh * np.asarray(step_ms, dtype=float)
    if bwd:
        all_bwd = sum(bwd.values())
        other = np.asarray(st.other_ms, dtype=float)
        for i in bwd:
            bwd[i] = bwd[i] + other * np.where(all_bwd > 0, bwd[i] / np.where(all_bwd > 0, all_bwd, 1.0), 0.0)
    ops = {i: (rows, fwd[i].tolist(), bwd[i].tolist()) for i in fwd}
    params: dict[str, float] = {}
    alone = sum(g.update_ms for g in st.groups)
    in_step = float(statistics.median(st.update_ms)) if st.update_ms else 0.0
    if alone > 0:
        for g in st.groups:
            names = list(dict.fromkeys(p for n in g.ops if n in by_name for p in graph.ops[by_name[n]].params))
            size = {p: _param_bytes(graph, p) for p in names}
            total = sum(size.values())
            for p in names:
                if total > 0:
                    params[p] = in_step * (g.update_ms / alone) * size[p] / total
    return ops, params


def _op_ms(db: ProfileDB, graph, i: int, phase: str, rows: int) -> float:
    """The profile's own figure of op i at `rows`, ms (0 when the profile lacks the op or the phase)."""
    prof = db.ops.get(op_signature(graph.ops[i], graph))
    series = None if prof is None else (prof.fwd_ms if phase == "fwd" else prof.bwd_ms)
    return 0.0 if series is None else interpolate(prof.rows, series, rows)


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

    @property
    def contention(self):
        """The contention terms of the first profile that has them (None when none has)."""
        return next((m.contention for m in self.by_type.values() if m.contention is not None), None)

    def scaled(self, factor: float) -> "MultiProfileCostModel":
        """Every profile's model scaled by `factor` (`ProfileCostModel.scaled`); the fallback unchanged."""
        return MultiProfileCostModel(self.gg, self.training, {t: m.scaled(factor) for t, m in self.by_type.items()},
                                     self.fallback)

    def group_fwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Forward time of a group on `device`, ms (that device type's profile)."""
        return self._model(device).group_fwd_ms(group_id, device, rows)

    def group_bwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Backward time of a group on `device`, ms (that device type's profile)."""
        return self._model(device).group_bwd_ms(group_id, device, rows)

    def update_ms(self, group_id: int, device: DeviceType) -> float:
        """Optimizer update of the group's parameters on one replica of `device`'s type, ms."""
        return self._model(device).update_ms(group_id, device)

    def launch_floor_ms(self, gid: int, device: DeviceType) -> float:
        """The floor of group `gid`'s forward (and backward) on `device`, ms (that type's model)."""
        return self._model(device).launch_floor_ms(gid, device)

    def ops_ms(self, gid: int, device: DeviceType, rows: int, phase: str, op_ids, share: float = 1.0) -> float:
        """The part of the group's phase time the ops `op_ids` take on `device`, ms (that type's model; `share` as
        `ProfileCostModel.ops_ms`)."""
        return self._model(device).ops_ms(gid, device, rows, phase, op_ids, share)

    def collective_hop_gbps(self, device: DeviceType, n_ranks: int) -> float | None:
        """Measured ring per-hop rate on `device`'s type, 10^9 bit/s (its type's profile; else None)."""
        fn = getattr(self._model(device), "collective_hop_gbps", None)
        return fn(device, n_ranks) if fn is not None else None

    def collective_step_us(self, device: DeviceType, n_ranks: int) -> float | None:
        """Measured per-step latency of a collective on `device`'s type, us (its type's profile; else None)."""
        fn = getattr(self._model(device), "collective_step_us", None)
        return fn(device, n_ranks) if fn is not None else None

    def collective_call_ms(self, device: DeviceType) -> dict | None:
        """{call kind: ms of one collective call after compute} on `device`'s type (its type's profile; else None)."""
        fn = getattr(self._model(device), "collective_call_ms", None)
        return fn(device) if fn is not None else None

    def sync_copy_ms(self, device: DeviceType, nbytes: float) -> tuple[float, float]:
        """(copy-in ms, copy-out ms) of a gradient sync of `nbytes` on `device` (its type's profile; else 0)."""
        fn = getattr(self._model(device), "sync_copy_ms", None)
        return fn(device, nbytes) if fn is not None else (0.0, 0.0)

    def fresh_fill_ms(self, device: DeviceType, nbytes: float) -> float:
        """A fresh zeroed buffer of `nbytes` on `device` (its type's profile; else 0)."""
        fn = getattr(self._model(device), "fresh_fill_ms", None)
        return fn(device, nbytes) if fn is not None else 0.0

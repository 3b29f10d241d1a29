"""Per-(GroupGraph, Cluster, CostModel, TrainingConfig) caches the simulator reuses across calls.

The search changes one group's decision at a time and simulates thousands of strategies, so the costs
of a group under a row map, the transfers of an edge between two row maps and the flows of a sync are
computed once and looked up afterwards.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tag.cost.optimizer import state_bytes_per_param
from tag.lru import Recent
from tag.sim.algorithms import choose_algorithm
from tag.sim.buckets import BucketSync, bucket_syncs, derive_buckets
from tag.sim.collectives import p2p_spec, sync_phases
from tag.sim.precision import edge_wire_bytes
from tag.strategy import AUTO, slices
from tag.strategy.pipeline import micro_rows

_MAX_ENTRIES = 200_000


class SimContext:
    """Caches for one (gg, cluster, cost, training)."""

    def __init__(self, gg, cluster, cost, training):
        self.gg, self.cluster, self.cost, self.training = gg, cluster, cost, training
        self.dtypes = [d.type for d in cluster.devices]
        self.type_ids = cluster.type_ids
        gs = gg.groups
        self.saved_per_row = np.array([g.saved_bytes_per_row for g in gs], dtype=float)
        self.saved_fixed = np.array([g.saved_bytes_fixed for g in gs], dtype=float)
        self.out_per_row = np.array([g.out_bytes_per_row for g in gs], dtype=float)
        self.param_bytes = np.array([g.param_bytes for g in gs], dtype=float)
        self.static_bytes = self.param_bytes + np.array([g.param_count for g in gs], dtype=float) * state_bytes_per_param(training.optimizer)
        precision = getattr(training, "precision", "fp32")
        self.edge_bytes = [edge_wire_bytes(gg, e, precision) for e in gg.edges]  # (per row, fixed) on the wire
        self._group: dict = {}
        self._edge: dict = {}
        self._phases: dict = {}
        self.sfb: dict = {}  # (group, rows, sfb ops) -> SFB compute terms (`tag.sim.gradsync.sfb_compute_ms`)
        self._bn_channels: list | None = None  # per group, its training-mode BatchNormalization channel counts
        self._last_buckets: tuple = (None, None)  # (strategy, its buckets): one simulation asks 2-3 times

    def group_costs(self, g: int, decision) -> tuple:
        """(devices, fwd ms per device, bwd ms per device, update ms per device) of group g (a sharded group's:
        `tag.sim.shards.sharded_costs`)."""
        key = (g, decision.rows) if decision.shard is None else (g, decision.rows, decision.shard)
        hit = self._group.get(key)
        if hit is None and decision.shard is not None:
            from tag.sim.shards import sharded_costs

            hit = self._group[key] = sharded_costs(self, g, decision)
        if hit is None:
            c, dt, tid = self.cost, self.dtypes, self.type_ids
            devs = list(decision.devices)
            rows = decision.rows
            per: dict = {}  # (device type, rows) -> (fwd, bwd, update): replicas of one type and rows cost alike
            for d in devs:
                k = (tid[d], rows[d])
                if k not in per:
                    per[k] = (c.group_fwd_ms(g, dt[d], rows[d]), c.group_bwd_ms(g, dt[d], rows[d]), c.update_ms(g, dt[d]))
            trip = [per[(tid[d], rows[d])] for d in devs]
            hit = (devs, [t[0] for t in trip], [t[1] for t in trip], [t[2] for t in trip])
            if len(self._group) > _MAX_ENTRIES:
                self._group.clear()
            self._group[key] = hit
        return hit

    def bn_channels(self, g: int) -> list[int]:
        """`tag.sim.batch_stats.training_bn_channels` of group g, computed once for all groups."""
        if self._bn_channels is None:
            from tag.sim.batch_stats import training_bn_channels

            self._bn_channels = [training_bn_channels(self.gg, k) for k in range(self.gg.n_groups)]
        return self._bn_channels[g]

    def micro_group_costs(self, g: int, decision, micro_batches: int) -> tuple:
        """`group_costs` of group g for one micro-batch: every device at rows[d] / micro_batches rows
        (`tag.strategy.pipeline.micro_rows`; the cost model is per row). Same devices and update ms."""
        return self.group_costs(g, micro_decision(decision, micro_batches))

    def edge_transfers(self, ei: int, producer, consumer) -> list:
        """[(src device, dst device, bytes, forward FlowSpec, backward FlowSpec)] of edge `ei`.

        Batched bytes move as `slices(producer rows, consumer rows)` merged per device pair; unbatched
        bytes go whole from the first producer device to each consumer device that is not a producer; a
        pair with no bytes still carries a latency-only message. The bytes are at the graph's dtypes (what
        `MemoryInputs.recv` records; the memory model applies the precision itself); the flows carry them at the
        training precision (`tag.sim.precision.edge_wire_bytes`: 16-bit activations under fp16 / bf16).
        """
        key = (ei, producer.rows, consumer.rows)
        hit = self._edge.get(key)
        if hit is not None:
            return hit
        e = self.gg.edges[ei]
        pairs = _edge_pairs(producer, consumer, e.bytes_per_row, e.bytes_fixed)
        wire = pairs if self.edge_bytes[ei] == (e.bytes_per_row, e.bytes_fixed) else \
            _edge_pairs(producer, consumer, *self.edge_bytes[ei])
        cl = self.cluster
        hit = [(s, d, b, p2p_spec(cl, s, d, wire[(s, d)]), p2p_spec(cl, d, s, wire[(s, d)]))
               for (s, d), b in pairs.items()]
        if len(self._edge) > _MAX_ENTRIES:
            self._edge.clear()
        self._edge[key] = hit
        return hit

    def sync_copy_ms(self, method: str, devices: tuple, nbytes: float) -> tuple[float, float]:
        """(copy-in ms, copy-out ms) around a gradient sync: the slowest of `devices` preparing the bucket
        before the collective and copying it back after (if it does) (`cost.sync_copy_ms`, a cost model's optional term;
        0 for cost models without it and for all-gathers: sufficient factors and ZeRO's weights)."""
        fn = getattr(self.cost, "sync_copy_ms", None)
        if fn is None or method.endswith("allgather") or nbytes <= 0:
            return 0.0, 0.0
        key = ("copy", method, devices, nbytes)
        hit = self._phases.get(key)
        if hit is None:
            both = [fn(self.dtypes[d], nbytes) for d in devices]
            hit = self._phases[key] = (max(b[0] for b in both), max(b[1] for b in both))
        return hit

    def ring_gbps(self, devices: tuple) -> float | None:
        """The measured per-hop rate of a ring collective over `devices`, 10^9 bit/s (`cost.collective_hop_gbps`,
        a cost model's optional term: the slowest of the ranks' device types), or None."""
        fn = getattr(self.cost, "collective_hop_gbps", None)
        if fn is None or len(devices) < 2:
            return None
        rates = [fn(self.dtypes[d], len(devices)) for d in devices]
        rates = [r for r in rates if r is not None]
        return min(rates) if rates else None

    def step_us(self, devices: tuple) -> float | None:
        """The measured per-step latency of a collective over `devices`, us (`cost.collective_step_us`, optional
        like `ring_gbps`: the slowest of the ranks' device types), or None."""
        fn = getattr(self.cost, "collective_step_us", None)
        steps = [] if fn is None or len(devices) < 2 else [fn(self.dtypes[d], len(devices)) for d in devices]
        steps = [s for s in steps if s is not None]
        return max(steps) if steps else None

    def call_ms(self, devices: tuple) -> dict | None:
        """{call kind: measured cost of one collective call over `devices`, ms} (`cost.collective_call_ms`,
        optional like `ring_gbps`: per kind the slowest of the ranks' device types), or None (`tag.sim.cpu_calls`)."""
        fn = getattr(self.cost, "collective_call_ms", None)
        found = [] if fn is None or len(devices) < 2 else [fn(self.dtypes[d]) for d in devices]
        out: dict = {}
        for c in (c for c in found if c):
            for kind, ms in c.items():
                out[kind] = max(out.get(kind, 0.0), ms)
        return out or None

    def choose_algorithm(self, devices: tuple, nbytes: float) -> str:
        """The cheapest by-cost collective for `nbytes` over `devices` (`tag.sim.algorithms.choose_algorithm`),
        cached."""
        key = ("choose", devices, nbytes)
        hit = self._phases.get(key)
        if hit is None:
            hit = self._phases[key] = choose_algorithm(self.cluster, devices, nbytes, self.ring_gbps(devices),
                                                       self.step_us(devices), self.call_ms(devices))
        return hit

    def resolve_method(self, method: str, devices: tuple, nbytes: float) -> str:
        """`method`, or for ``"auto"`` the cheapest by cost."""
        return self.choose_algorithm(devices, nbytes) if method == AUTO else method

    def buckets(self, strategy) -> tuple:
        """The strategy's buckets: explicit, or derived from its decisions and bucket_mb with the by-cost algorithms
        (`tag.sim.buckets.derive_buckets`). The last strategy's are kept: the search's simulation key, the task-graph
        builder and the memory pass ask for the same strategy object in turn (strategies are immutable)."""
        if strategy.buckets is not None:
            return strategy.buckets
        last, hit = self._last_buckets
        if last is not strategy:
            hit = derive_buckets(self.gg, strategy.decisions, strategy.bucket_mb, self.choose_algorithm)
            self._last_buckets = (strategy, hit)
        return hit

    def bucket_syncs(self, strategy) -> list[BucketSync]:
        """The strategy's buckets (`buckets`) with devices and bytes."""
        return bucket_syncs(self.gg, strategy, self.buckets(strategy))

    def phases(self, method: str, devices: tuple, nbytes: float, server) -> list:
        """The cached `sync_phases` of one sync."""
        key = (method, devices, nbytes, server)
        hit = self._phases.get(key)
        if hit is None:
            hit = sync_phases(method, self.cluster, devices, nbytes, server, self.ring_gbps(devices),
                              self.step_us(devices), self.call_ms(devices))
            if len(self._phases) > _MAX_ENTRIES:
                self._phases.clear()
            self._phases[key] = hit
        return hit


def _edge_pairs(producer, consumer, per_row: float, fixed: float) -> dict[tuple[int, int], float]:
    """{(src device, dst device): bytes} of an edge of `per_row` batched and `fixed` unbatched bytes
    (`SimContext.edge_transfers`)."""
    pairs: dict[tuple[int, int], float] = {}
    if per_row > 0 and producer.rows != consumer.rows:
        for sl in slices(producer.rows, consumer.rows):
            pairs[(sl.src, sl.dst)] = pairs.get((sl.src, sl.dst), 0.0) + sl.rows * per_row
    pdevs = producer.devices
    if pdevs and (fixed > 0 or per_row <= 0):
        pset = set(pdevs)
        for d in consumer.devices:
            if d not in pset:
                pairs[(pdevs[0], d)] = pairs.get((pdevs[0], d), 0.0) + fixed
    return pairs


def micro_decision(decision, micro_batches: int):
    """The decision with its row map cut to one micro-batch (rows[d] / micro_batches each; same sync, server, SFB).

    >>> from tag.strategy import Decision
    >>> micro_decision(Decision((8, 4, 0)), 4).rows
    (2, 1, 0)
    """
    if micro_batches == 1:
        return decision
    return replace(decision, rows=micro_rows(decision.rows, micro_batches))


_CONTEXTS: "Recent[SimContext]" = Recent(8)


def sim_context(gg, cluster, cost, training) -> SimContext:
    """The cached SimContext of these objects (the few most recently used are kept)."""
    key = (id(gg), id(cluster), id(cost), training)
    ctx = _CONTEXTS.get(key)
    if ctx is None or ctx.gg is not gg or ctx.cluster is not cluster or ctx.cost is not cost:
        ctx = _CONTEXTS.put(key, SimContext(gg, cluster, cost, training))
    return ctx


"""The GNN's graph (`tag.gnn.graph.HeteroGraph`) from (GroupGraph, Cluster, cost model, partial strategy): the GNN's view of one search state.

Node types ``group`` (op groups) and ``device``; edge types

* ``(group, flow, group)`` and ``(group, rev_flow, group)``: tensors between groups, forward and back;
* ``(device, link, device)``: every ordered device pair (bandwidth, latency, same machine);
* ``(group, place, device)`` and ``(device, hosts, group)``: every group-device pair (predicted compute
  time of the group there at its rows, whether it is assigned there now);
* ``(device, uses, cand)``: the candidate decisions of the group being decided (policy samples only),
  weighted by each device's share of the rows.

A state also carries `u` [1, GLOBAL_DIM]: whole-strategy summaries (the busiest device's compute, total and
largest gradient-sync and transfer times, memory pressure, and the critical-path estimate `tag.gnn.estimate`:
its iteration time, end of backward and link time held by syncs) that the value head reads next to its
pooling, and `v_prior` [1]: ln(time_scale_ms / estimated iteration ms), which the value head corrects
(`TagGNN` config "value_prior"). States built with `value_features=False` (the policy-only priors) skip the
estimate and carry zeros there.

Every time — compute, bytes over bandwidth, latency — is divided by one per-instance time scale,
`time_scale_ms` = the iteration compute time if every device shared the whole model's forward and
backward in proportion to its speed (1 / sum_d 1 / T_d, T_d = the whole model at the full batch on d).
So the compute-to-communication ratio that decides data parallelism versus placement survives
normalisation: a cluster whose devices and links are all twice as fast gives identical features, while
faster links alone shrink every communication feature. Times enter as log1p(time / scale).

The graph's arrays are numpy (features float32, edge indices int64): `tag.gnn.infer` reads them as they are, and
the torch networks after `tag.gnn.graph.to_torch` (which `batch_graphs` applies).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tag.cost import comm
from tag.gnn.estimate import Estimate, estimate
from tag.gnn.graph import HeteroGraph
from tag.search.space import even_rows, group_has_params
from tag.sim.memory import static_bytes
from tag.strategy import Decision, Strategy, TrainingConfig, slices

FEATURE_VERSION = 3  # 2: global state features `u`, candidate load-after features, value = ln(scale/iteration)
# 3: `u` gains the critical-path estimate (3 entries) and states carry `v_prior`; policy inputs as in 2
SYNCS = (None, "allreduce", "hierarchical", "ps")  # the feature slots the shipped weights were trained with
_SLOT = {"ring": "allreduce", "tree": "allreduce", "auto": "allreduce", "leader": "hierarchical"}  # v2 names
GROUP_DIM = 16
DEVICE_DIM = 8
LINK_DIM = 5
FLOW_DIM = 5
PLACE_DIM = 5
CAND_DIM = 17
GLOBAL_DIM = 10
SPEED_FLOOR, SPEED_CEIL = -6.0, 1.0  # range of value targets (`targets.speed_target`) and of `v_prior`
EDGE_DIMS = {
    ("group", "flow", "group"): FLOW_DIM,
    ("group", "rev_flow", "group"): FLOW_DIM,
    ("device", "link", "device"): LINK_DIM,
    ("group", "place", "device"): PLACE_DIM,
    ("device", "hosts", "group"): PLACE_DIM,
}
USES = ("device", "uses", "cand")


def _l(x):
    """log1p of a non-negative time ratio (elementwise)."""
    return np.log1p(np.maximum(np.asarray(x, dtype=np.float64), 0.0))


def _index(pairs) -> np.ndarray:
    """Edge index [2, E] (int64, C-contiguous) from (source, destination) pairs."""
    return np.ascontiguousarray(np.array(pairs, dtype=np.int64).reshape(-1, 2).T)


def _sync_onehot(sync: str | None) -> list[float]:
    sync = _SLOT.get(sync, sync)
    return [1.0 if sync == s else 0.0 for s in SYNCS]


class InstanceFeatures:
    """The static part of one instance (model groups x cluster x cost model) and the per-state builder.

    `order` (optional) is the order the search decides groups in; groups before the current one in it
    are flagged as decided.
    """

    def __init__(self, gg, cluster, cost, batch: int | None = None, optimizer: str = "adam",
                 order: Sequence[int] | None = None, training=None):
        self.gg, self.cluster, self.cost = gg, cluster, cost
        self.batch = int(batch or gg.graph.batch_size)
        self.optimizer = optimizer
        self.training = training if training is not None else TrainingConfig(optimizer=optimizer)
        self.K, self.n = gg.n_groups, cluster.n_devices
        self.order = list(order) if order is not None else list(range(self.K))
        self.rank = {g: i for i, g in enumerate(self.order)}
        self._ms_cache: dict[tuple[int, str, int], float] = {}
        self._flow_cache: dict[tuple[int, tuple, tuple], tuple[float, float]] = {}
        self._estimates: dict[Strategy, Estimate] = {}  # `estimate` per strategy (a pure function of it here)
        K, n, B = self.K, self.n, self.batch
        self.types = [d.type for d in cluster.devices]
        self.full_ms = np.array([[self.compute_ms(g, d, B) for d in range(n)] for g in range(K)])
        per_device = self.full_ms.sum(axis=0)
        self.time_scale_ms = float(1.0 / np.sum(1.0 / np.maximum(per_device, 1e-12)))
        bw = np.array(cluster.bandwidth_gbps, dtype=np.float64)
        off = ~np.eye(n, dtype=bool)
        if n > 1:
            self.median_gbps = float(np.median(bw[off]))
        else:
            self.median_gbps = float(cluster.machines[0].intra_bandwidth_gbps)
        self.bw, self.lat_us = bw, np.array(cluster.latency_us, dtype=np.float64)
        self.usable = np.array([t.usable_memory_bytes for t in self.types])
        self.has_params = [group_has_params(gg, g) for g in range(K)]
        self.static_b = np.array([static_bytes(g, optimizer) for g in gg.groups])
        self.saved_pr = np.array([g.saved_bytes_per_row for g in gg.groups])
        self.saved_fix = np.array([g.saved_bytes_fixed for g in gg.groups])
        self._build_static()

    # ---- formulas used by several features -------------------------------------------------------
    def compute_ms(self, g: int, d: int, rows: int) -> float:
        """Forward + backward of group g for `rows` rows on device d, ms (0 for no rows; cached)."""
        if rows <= 0:
            return 0.0
        t = self.types[d]
        key = (g, t.name, int(rows))
        v = self._ms_cache.get(key)
        if v is None:
            v = self.cost.group_fwd_ms(g, t, int(rows)) + self.cost.group_bwd_ms(g, t, int(rows))
            self._ms_cache[key] = v
        return v

    def ratio(self, ms):
        """Time(s) in ms on the instance's scale, as log1p(ms / time_scale_ms)."""
        return _l(np.asarray(ms, dtype=np.float64) / self.time_scale_ms)

    def bytes_ms(self, nbytes) -> np.ndarray:
        """Bytes moved at the cluster's median pairwise bandwidth, ms."""
        return np.asarray(nbytes, dtype=np.float64) / comm.bytes_per_ms(self.median_gbps)

    def mem_bytes(self, g: int, rows: int) -> float:
        """Approximate bytes group g holds on a device computing `rows` of its rows (states + saved)."""
        if rows <= 0:
            return 0.0
        return float(self.static_b[g] + self.saved_pr[g] * rows + self.saved_fix[g])

    def transfer_ms(self, nbytes_per_row: float, nbytes_fixed: float, rows_src: tuple, rows_dst: tuple) -> tuple[float, float]:
        """(slowest point-to-point transfer ms, share of rows moved) between two row maps of one edge."""
        key = (nbytes_per_row, nbytes_fixed, rows_src, rows_dst)
        hit = self._flow_cache.get(key)
        if hit is not None:
            return hit
        worst, moved = 0.0, 0
        for s in slices(rows_src, rows_dst):
            worst = max(worst, comm.p2p_ms(s.rows * nbytes_per_row, self.bw[s.src, s.dst], self.lat_us[s.src, s.dst]))
            moved += s.rows
        if nbytes_fixed > 0:
            src = next(d for d, r in enumerate(rows_src) if r > 0)
            for d, r in enumerate(rows_dst):
                if r > 0 and rows_src[d] == 0:
                    worst = max(worst, comm.p2p_ms(nbytes_fixed, self.bw[src, d], self.lat_us[src, d]))
        out = (worst, moved / self.batch)
        self._flow_cache[key] = out
        return out

    def sync_ms(self, g: int, dec: Decision) -> float:
        """Estimated gradient-sync time of group g under a decision, uncontended, ms."""
        devs = dec.devices
        nbytes = self.gg.groups[g].param_bytes
        if len(devs) < 2 or nbytes <= 0:
            return 0.0
        if dec.sync == "ps" and dec.server is not None:
            others = [d for d in devs if d != dec.server]
            bw = min(self.bw[dec.server, d] for d in others)
            lat = max(self.lat_us[dec.server, d] for d in others)
            return comm.ps_ms(nbytes, len(others), bw, lat)
        ring = list(devs) + [devs[0]]
        bw = min(self.bw[a, b] for a, b in zip(ring, ring[1:]))
        lat = max(self.lat_us[a, b] for a, b in zip(ring, ring[1:]))
        return comm.ring_allreduce_ms(nbytes, len(devs), bw, lat)

    # ---- static parts ---------------------------------------------------------------------------
    def _build_static(self) -> None:
        gg, cl, K, n, B = self.gg, self.cluster, self.K, self.n, self.batch
        med_usable = float(np.median(self.usable))
        g_static = []
        for g, grp in enumerate(gg.groups):
            need = self.mem_bytes(g, B)
            g_static.append([
                self.ratio(self.full_ms[g].min()), self.ratio(self.full_ms[g].mean()),
                self.ratio(2.0 * self.bytes_ms(grp.param_bytes)),
                self.ratio(self.bytes_ms(grp.out_bytes_per_row * B)),
                float(grp.splittable), float(self.has_params[g]), float(_l(need / med_usable)),
                g / max(K - 1, 1),
            ])
        self.g_static = np.array(g_static, dtype=np.float64).reshape(K, 8)
        machines = {m.name: len(m.device_indices) for m in cl.machines}
        model_need = sum(self.mem_bytes(g, B) for g in range(K))
        self.d_static = np.array([[float(self.ratio(self.full_ms[:, d].sum())), float(_l(self.usable[d] / max(model_need, 1.0))),
                                   machines[cl.devices[d].machine] / n, 1.0 / n] for d in range(n)], dtype=np.float64).reshape(n, 4)
        # links: every ordered pair
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
        param_bytes = sum(grp.param_bytes for grp in gg.groups)
        act_bytes = float(np.mean([e.bytes_per_row * B + e.bytes_fixed for e in gg.edges])) if gg.edges else 0.0
        link = []
        for i, j in pairs:
            bpm = comm.bytes_per_ms(self.bw[i, j])
            link.append([self.ratio(param_bytes / bpm), self.ratio(act_bytes / bpm), self.ratio(self.lat_us[i, j] / 1e3),
                         float(cl.devices[i].machine == cl.devices[j].machine), float(np.log(self.bw[i, j] / self.median_gbps))])
        self.link_index = _index(pairs)
        self.link_attr = np.array(link, dtype=np.float64).reshape(-1, LINK_DIM).astype(np.float32)
        # flows
        self.flow_index = _index([(e.src, e.dst) for e in gg.edges])
        self.rev_flow_index = np.ascontiguousarray(self.flow_index[::-1])
        self.flow_static = np.array([[self.ratio(self.bytes_ms(e.bytes_per_row * B)), self.ratio(self.bytes_ms(e.bytes_fixed))]
                                     for e in gg.edges], dtype=np.float64).reshape(-1, 2)
        # places: (g, d) row-major
        gi, di = np.meshgrid(np.arange(K), np.arange(n), indexing="ij")
        self.place_index = np.stack([gi.ravel(), di.ravel()]).astype(np.int64)
        self.hosts_index = np.ascontiguousarray(self.place_index[::-1])
        mem_full = np.array([[self.mem_bytes(g, B) / self.usable[d] for d in range(n)] for g in range(K)])
        self.place_static = np.stack([self.ratio(self.full_ms).ravel(), _l(mem_full).ravel()], axis=1)

    # ---- per state --------------------------------------------------------------------------------
    def _state_arrays(self, strategy: Strategy):
        K, n = self.K, self.n
        rows = np.array([d.rows for d in strategy.decisions], dtype=np.int64).reshape(K, n)
        tm = np.zeros((K, n))
        mem = np.zeros((K, n))
        for g, d in zip(*np.nonzero(rows)):
            tm[g, d] = self.compute_ms(int(g), int(d), int(rows[g, d]))
            mem[g, d] = self.mem_bytes(int(g), int(rows[g, d]))
        return rows, tm, mem

    def estimate(self, strategy: Strategy) -> Estimate:
        """The critical-path estimate of `strategy` on this instance (`tag.gnn.estimate`), memoised per strategy: the
        structure tree asks for the same state's features again (74 asks for 50 strategies on gpt2_medium /
        heterog8)."""
        est = self._estimates.get(strategy)
        if est is None:
            est = self._estimates[strategy] = estimate(self.gg, self.cluster, self.cost, strategy, self.training)
        return est

    def state(self, strategy: Strategy, current: int | None = None,
              candidates: Sequence[Decision] | None = None, value_features: bool = True) -> HeteroGraph:
        """The HeteroGraph of a search state: `strategy` (complete; undecided groups hold the base decision),
        `current` the group being decided and its `candidates` (adds the ``cand`` nodes). `value_features=False`
        skips the critical-path estimate (zeros in `u` and `v_prior`): for callers that read only the policy."""
        K, n, B = self.K, self.n, self.batch
        rows, tm, mem = self._state_arrays(strategy)
        share = rows / B
        cur_rank = self.rank.get(current, K) if current is not None else K
        g_dyn = np.zeros((K, GROUP_DIM - 8))
        sync = np.zeros(K)
        for g, dec in enumerate(strategy.decisions):
            sync[g] = self.sync_ms(g, dec)
            g_dyn[g, 0] = float(g == current)
            g_dyn[g, 1] = float(self.rank[g] < cur_rank)
            g_dyn[g, 2] = len(dec.devices) / n
            g_dyn[g, 3:7] = _sync_onehot(dec.sync)
            g_dyn[g, 7] = self.ratio(tm[g].max() + sync[g])
        dev_mem = mem.sum(axis=0)
        d_dyn = np.stack([self.ratio(tm.sum(axis=0)), share.mean(axis=0), (rows > 0).sum(axis=0) / K,
                          _l(dev_mem / self.usable)], axis=1)
        data = HeteroGraph()
        data["group"].x = np.concatenate([self.g_static, g_dyn], axis=1).astype(np.float32)
        data["device"].x = np.concatenate([self.d_static, d_dyn], axis=1).astype(np.float32)
        data["device", "link", "device"].edge_index = self.link_index
        data["device", "link", "device"].edge_attr = self.link_attr
        flow_dyn = []
        for e in self.gg.edges:
            ms, moved = self.transfer_ms(e.bytes_per_row, e.bytes_fixed, strategy.decisions[e.src].batch_rows,
                                         strategy.decisions[e.dst].batch_rows)
            flow_dyn.append([float(self.ratio(ms)), moved])
        flow_dyn = np.array(flow_dyn, dtype=np.float64).reshape(-1, 2)
        est = self.estimate(strategy) if value_features else None
        data.u = self.global_features(tm, sync, flow_dyn, dev_mem, est).astype(np.float32).reshape(1, GLOBAL_DIM)
        data.v_prior = np.array([self.prior_value(est)], dtype=np.float32)
        flow = np.concatenate([self.flow_static, flow_dyn], axis=1)
        fwd = np.concatenate([flow, np.ones((len(flow), 1))], axis=1).astype(np.float32)
        bwd = np.concatenate([flow, np.zeros((len(flow), 1))], axis=1).astype(np.float32)
        data["group", "flow", "group"].edge_index = self.flow_index
        data["group", "flow", "group"].edge_attr = fwd
        data["group", "rev_flow", "group"].edge_index = self.rev_flow_index
        data["group", "rev_flow", "group"].edge_attr = bwd
        place = np.concatenate([self.place_static, (rows > 0).reshape(-1, 1), share.reshape(-1, 1),
                                self.ratio(tm).reshape(-1, 1)], axis=1).astype(np.float32)
        data["group", "place", "device"].edge_index = self.place_index
        data["group", "place", "device"].edge_attr = place
        data["device", "hosts", "group"].edge_index = self.hosts_index
        data["device", "hosts", "group"].edge_attr = place
        if candidates is not None:
            cx, ci, cw = self.candidate_features(strategy, current, candidates, mem, tm)
            data["cand"].x = cx
            data[USES].edge_index = ci
            data[USES].edge_attr = cw
        return data

    def global_features(self, tm: np.ndarray, sync_ms: np.ndarray, flow: np.ndarray, dev_mem: np.ndarray,
                        est: Estimate | None = None) -> np.ndarray:
        """[GLOBAL_DIM] summaries of a state: busiest device's compute, total and largest sync, total and largest
        transfer (all log1p of time / time_scale_ms), worst memory ratio (log1p), whether any device overflows,
        and the critical-path estimate's iteration, end of backward and sync link time (log1p of time /
        time_scale_ms; zeros without `est`).

        tm [K, n] compute ms at the assigned rows; sync_ms [K]; flow [E, 2] (log-scaled transfer, moved share);
        dev_mem [n] bytes held per device.
        """
        flow_ms = np.expm1(flow[:, 0]) * self.time_scale_ms if len(flow) else np.zeros(1)
        mem_r = dev_mem / self.usable
        est_part = ([self.ratio(est.iteration_ms), self.ratio(est.backward_end_ms), self.ratio(est.sync_busy_ms)]
                    if est is not None else [0.0, 0.0, 0.0])
        return np.array([self.ratio(tm.sum(axis=0).max()), self.ratio(sync_ms.sum()), self.ratio(sync_ms.max()),
                         self.ratio(flow_ms.sum()), self.ratio(flow_ms.max()), float(_l(mem_r.max())),
                         float(mem_r.max() > 1.0), *est_part], dtype=np.float64)

    def prior_value(self, est: Estimate | None) -> float:
        """ln(time_scale_ms / estimated iteration ms) clipped to [SPEED_FLOOR, SPEED_CEIL]; 0 without `est`."""
        if est is None or not np.isfinite(est.iteration_ms) or est.iteration_ms <= 0:
            return 0.0
        return float(min(SPEED_CEIL, max(SPEED_FLOOR, np.log(self.time_scale_ms / est.iteration_ms))))

    def candidate_features(self, strategy: Strategy, g: int, candidates: Sequence[Decision], mem: np.ndarray,
                           tm: np.ndarray | None = None):
        """Per candidate decision of group g: features [C, CAND_DIM], device->cand edges and row shares.

        `tm` [K, n]: compute ms of every group at its current rows (for the busiest-device load after the
        candidate replaces g's decision; recomputed when omitted)."""
        n, B = self.n, self.batch
        mem_other = mem.sum(axis=0) - mem[g]
        if tm is None:
            tm = self._state_arrays(strategy)[1]
        load_other = tm.sum(axis=0) - tm[g]
        load_now = float(tm.sum(axis=0).max())
        preds, succs = self.gg.preds(g), self.gg.succs(g)
        feats, src, dst, w = [], [], [], []
        for c, dec in enumerate(candidates):
            devs = dec.devices
            k = len(devs)
            t_comp = max(self.compute_ms(g, d, dec.rows[d]) for d in devs)
            t_in = sum(self.transfer_ms(e.bytes_per_row, e.bytes_fixed, strategy.decisions[e.src].batch_rows,
                                        dec.batch_rows)[0] for e in preds)
            t_out = sum(self.transfer_ms(e.bytes_per_row, e.bytes_fixed, dec.batch_rows,
                                         strategy.decisions[e.dst].batch_rows)[0] for e in succs)
            t_sync = self.sync_ms(g, dec)
            t_upd = self.cost.update_ms(g, self.types[devs[0]]) if self.has_params[g] else 0.0
            mem_r = max((mem_other[d] + self.mem_bytes(g, dec.rows[d])) / self.usable[d] for d in devs)
            balanced = float(k > 1 and tuple(dec.rows) != even_rows(devs, B, n))
            load = load_other.copy()
            for d in devs:
                load[d] += self.compute_ms(g, d, dec.rows[d])
            load_after = float(load.max())
            feats.append([float(c == 0), k / n, np.log(k) / np.log(n + 1), *_sync_onehot(dec.sync), balanced,
                          *self.ratio([t_comp, t_sync, t_in, t_out, t_upd]), float(_l(mem_r)), float(mem_r > 1.0),
                          float(self.ratio(load_after)), (load_after - load_now) / self.time_scale_ms])
            for d in devs:
                src.append(d)
                dst.append(c)
                w.append(dec.rows[d] / B)
        cx = np.array(feats, dtype=np.float64).reshape(-1, CAND_DIM).astype(np.float32)
        ci = np.array([src, dst], dtype=np.int64).reshape(2, -1)
        cw = np.array(w, dtype=np.float32).reshape(-1, 1)
        return cx, ci, cw

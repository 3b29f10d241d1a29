"""Baechi's memory-constrained placers (Jeon et al., SoCC 2020) over op groups: m-TOPO and m-ETF.

Both put every group whole on one device (all batch rows there: model parallelism) and keep each device's memory
under its usable memory by the simulator's own memory model (`tag.sim.memory`: the same per-group terms and the
same walk, on a one-device view of the placement, `placement_peak_bytes`), so a placement they accept is one the
simulator says fits, up to the headroom of gradients counted as received from consumers not placed yet. m-TOPO's
proportional caps read each group's persistent and saved bytes (`group_memory_bytes`) from the same terms.
"""

from __future__ import annotations

import numpy as np

from tag.cost.comm import p2p_ms
from tag.lru import Recent
from tag.sim.context import sim_context
from tag.sim.memory import memory_terms, peak_memory_bytes, shared_static_bytes
from tag.sim.tensor_sends import placement_received_bytes
from tag.strategy import Decision, Strategy

M_TOPO_SLACK = 0.10  # each device may take 10 % more than its proportional share of the model's memory


def _precision(ctx) -> str:
    return getattr(ctx.training, "precision", "fp32")


def group_memory_bytes(ctx, rows: int) -> np.ndarray:
    """Per group, the bytes it holds whole on one device computing `rows` rows (`tag.sim.memory.memory_terms`
    of one replica, nothing received): static (weights, optimizer states) + saved activations + its gradient."""
    k = ctx.gg.n_groups
    t = memory_terms(ctx, [Decision((rows,))] * k, None, ctx.training.optimizer, _precision(ctx), devices=[0])
    return (t.static + t.saved + t.kept)[:, 0]


def transfer_ms(cluster, src: int, dst: int, nbytes: float) -> float:
    """Time to send `nbytes` from device src to dst over their route alone (`tag.cost.comm.p2p_ms`), ms."""
    if src == dst or nbytes <= 0:
        return 0.0
    return p2p_ms(nbytes, float(cluster.bandwidth_gbps[src, dst]), float(cluster.latency_us[src, dst]))


def edge_bytes(edge, batch: int) -> float:
    """Bytes a group edge carries when the whole batch crosses it (batched rows + unbatched tensors)."""
    return edge.bytes_per_row * batch + edge.bytes_fixed


def _placement_strategy(gg, cluster, placement: list[int], batch: int) -> Strategy:
    decisions = []
    for dev in placement:
        rows = [0] * cluster.n_devices
        rows[dev] = batch
        decisions.append(Decision(rows=tuple(rows)))
    return Strategy(tuple(decisions))


_EDGES: Recent = Recent(8)  # id(graph) -> (graph, ins, outs)


def _edges_by_group(gg) -> tuple[list[list], list[list]]:
    """(edges into each group, edges out of each group), in edge order; cached for the last few graphs."""
    hit = _EDGES.get(id(gg))
    if hit is None or hit[0] is not gg:
        ins: list[list] = [[] for _ in range(gg.n_groups)]
        outs: list[list] = [[] for _ in range(gg.n_groups)]
        for e in gg.edges:
            ins[e.dst].append(e)
            outs[e.src].append(e)
        hit = _EDGES.put(id(gg), (gg, ins, outs))
    return hit[1], hit[2]


def placement_peak_bytes(ctx, device: list[int], d: int, batch: int, extra: tuple[int, int] | None = None) -> float:
    """Peak bytes on device d of a whole-group placement (`device[g]` = device or -1 if not placed yet), with
    `extra` = (group, device) placed too: `tag.sim.memory.peak_memory_bytes` on the view of device d (exact for
    whole groups), with its groups at `batch` rows, the shared parameters held there
    (`tag.sim.memory.shared_static_bytes`) and what d receives (whole batch, at the graph's dtypes as the
    simulator's transfer pairs, `tag.sim.tensor_sends.placement_received_bytes`): activations made elsewhere,
    gradients of tensors read elsewhere or by groups not placed yet (headroom, so later placements cannot push d
    over; zero once every consumer is placed). Placing a group on one device can raise its predecessors' devices' peaks
    (they receive its gradients), so a placer checks those devices too."""
    gg = ctx.gg
    where = list(device)
    if extra is not None:
        where[extra[0]] = extra[1]
    on, off = _row_decisions(batch)
    recv_fwd, recv_bwd = placement_received_bytes(ctx, where, d, batch)  # each tensor once per device (issue 21)
    opt = ctx.training.optimizer
    shared = shared_static_bytes(gg, [(x,) if x >= 0 else () for x in where], opt, len(ctx.dtypes))[d]
    here = [g for g, x in enumerate(where) if x == d]
    if not here:
        decisions = [off] * len(where)
        return float(peak_memory_bytes(ctx, decisions, None, opt, shared, _precision(ctx), devices=[d],
                                       received=(recv_fwd, recv_bwd))[0])
    # the groups d hosts (every other group's terms are 0 on d: `tag.sim.memory.memory_terms`' subset)
    return float(peak_memory_bytes(ctx, [on] * len(here), None, opt, shared, _precision(ctx), devices=[d],
                                   received=(recv_fwd[here], recv_bwd[here]), groups=here)[0])


_ROWS: dict = {}


def _row_decisions(batch: int) -> tuple[Decision, Decision]:
    """(the whole batch on the viewed device, nothing there), built once per batch."""
    if batch not in _ROWS:
        _ROWS[batch] = (Decision((batch,)), Decision((0,)))
    return _ROWS[batch]


def overflow_bytes(ctx, device: list[int], g: int, d: int, batch: int, usable: list[float]) -> float:
    """Bytes over usable memory, worst device, if group g goes on d (d and g's predecessors' devices), >= 0."""
    ins, _ = _edges_by_group(ctx.gg)
    touched = {d} | {device[e.src] for e in ins[g] if device[e.src] >= 0}
    return max(0.0, max(placement_peak_bytes(ctx, device, x, batch, extra=(g, d)) - usable[x] for x in touched))


def m_topo(gg, cluster, cost, training, batch: int) -> Strategy:
    """m-TOPO: groups in topological order fill devices in topology order up to a memory cap.

    Device d's cap is min(usable memory, (1 + M_TOPO_SLACK) x total model memory x usable_d / sum of
    usable): Baechi's total/n share, made proportional to memory for unequal devices (the model memory
    is the sum of `group_memory_bytes`). A group goes on the current device if it stays under the cap
    (or the device is still empty) and fits by the simulator's memory model (`overflow_bytes` = 0);
    otherwise placement moves on to the next device. Past the last device, a group goes where its
    overflow is smallest (the simulator reports the OOM).
    """
    n = cluster.n_devices
    ctx = sim_context(gg, cluster, cost, training)
    need = group_memory_bytes(ctx, batch).tolist()
    usable = [d.type.usable_memory_bytes for d in cluster.devices]
    total = sum(need)
    caps = [min(usable[d], (1 + M_TOPO_SLACK) * total * usable[d] / sum(usable)) for d in range(n)]
    used = [0.0] * n
    device, cur = [-1] * gg.n_groups, 0
    for g in range(gg.n_groups):
        over = _overflow_memo(ctx, cluster, device, g, batch, usable)
        while cur < n and ((used[cur] > 0 and used[cur] + need[g] > caps[cur]) or over(cur) > 0):
            cur += 1
        dev = cur if cur < n else min(range(n), key=lambda d: (over(d), d))
        used[dev] += need[g]
        device[g] = dev
    return _placement_strategy(gg, cluster, device, batch)


def _overflow_memo(ctx, cluster, device: list[int], g: int, batch: int, usable: list[float]):
    """over(d) = `overflow_bytes(ctx, device, g, d, batch, usable)` for the placement `device` as it is now, with
    the same figures from fewer memory walks: (1) a device x of g's predecessors other than d has the same peak
    wherever else g goes (g is remote to x: x receives g's gradients and sends it activations either way), so it is
    walked once per g; (2) on a device that holds no group yet, g's peak depends on the device's type only (it
    holds g alone and receives every edge of g), so empty devices are walked once per type: on 1,024 devices of 2
    types a placer walks 2 empty devices, not 1,000. Walks per call of a placer's step: the occupied devices asked
    about, one per type of empty device, one per predecessor device."""
    occupied = {x for x in device if x >= 0}
    ins, _ = _edges_by_group(ctx.gg)
    preds = {device[e.src] for e in ins[g] if device[e.src] >= 0}
    remote: dict[int, float] = {}  # predecessor device x -> its excess with g placed elsewhere
    seen: dict = {}  # occupied device, or an empty device's type -> over(d)

    def excess_remote(x: int) -> float:
        if x not in remote:
            elsewhere = 1 if x == 0 else 0  # any device but x
            remote[x] = placement_peak_bytes(ctx, device, x, batch, extra=(g, elsewhere)) - usable[x]
        return remote[x]

    def compute(d: int) -> float:
        own = placement_peak_bytes(ctx, device, d, batch, extra=(g, d)) - usable[d]
        return max(0.0, own, *(excess_remote(x) for x in preds if x != d))

    def over(d: int) -> float:
        key = d if d in occupied else cluster.devices[d].type
        if key not in seen:
            seen[key] = compute(d)
        return seen[key]
    return over


def etf_schedule(gg, cluster, cost, training, batch: int) -> tuple[list[int], list[float], list[float]]:
    """m-ETF list schedule: (device, start ms, finish ms) per group.

    Repeatedly takes, among groups whose predecessors are all scheduled and devices with memory room
    (`overflow_bytes` = 0), the (group, device) pair with the earliest start time, where start = max(device
    free, max over predecessors of their finish + transfer of the edge's bytes at the whole batch from
    the predecessor's device). A group's time on a device is its forward + backward at the whole batch.
    Ties: earlier finish, then lower group id, then lower device index. Room is checked on the device and
    on the devices of the group's predecessors (they receive its gradients). If no pair fits, the pair
    with the smallest overflow (bytes over usable memory on any device it touches) is taken.

    Empty devices of one type in one machine are interchangeable (same speed, memory and routes), so only the
    first of them (the one the tie-break would pick) is tried: the schedule is the same as trying them all. An empty
    device's memory room is checked once per device type and step (`_overflow_memo`).
    """
    n, k = cluster.n_devices, gg.n_groups
    ctx = sim_context(gg, cluster, cost, training)
    used = [False] * n
    usable = [d.type.usable_memory_bytes for d in cluster.devices]
    preds: list[list] = [[] for _ in range(k)]
    for e in gg.edges:
        preds[e.dst].append(e)
    run_ms: dict[tuple[int, object], float] = {}

    def dur(g: int, d: int) -> float:
        t = cluster.devices[d].type
        if (g, t) not in run_ms:
            run_ms[g, t] = cost.group_fwd_ms(g, t, batch) + cost.group_bwd_ms(g, t, batch)
        return run_ms[g, t]

    device = [-1] * k
    start, finish = [0.0] * k, [0.0] * k
    free = [0.0] * n
    done = 0
    while done < k:
        ready = [g for g in range(k) if device[g] < 0 and all(device[e.src] >= 0 for e in preds[g])]
        best = None
        empty_seen: set = set()
        devices = []
        for d in range(n):
            if not used[d]:
                cls = (cluster.devices[d].machine, cluster.devices[d].type)
                if cls in empty_seen:
                    continue
                empty_seen.add(cls)
            devices.append(d)
        for g in ready:
            over = _overflow_memo(ctx, cluster, device, g, batch, usable)
            for d in devices:
                s = free[d]
                for e in preds[g]:
                    s = max(s, finish[e.src] + transfer_ms(cluster, device[e.src], d, edge_bytes(e, batch)))
                key = (s, s + dur(g, d), g, d)
                if best is not None and best[0] == 0.0 and key > best[1]:
                    continue  # cannot beat a fitting candidate
                cand = (over(d), key)
                if best is None or cand < best:
                    best = cand
        s, f, g, d = best[1]
        device[g], start[g], finish[g] = d, s, f
        free[d] = f
        used[d] = True
        done += 1
    return device, start, finish


def m_etf(gg, cluster, cost, training, batch: int) -> Strategy:
    """m-ETF: the placement of `etf_schedule` (each group whole on its scheduled device)."""
    device, _, _ = etf_schedule(gg, cluster, cost, training, batch)
    return _placement_strategy(gg, cluster, device, batch)

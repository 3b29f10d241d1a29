"""The event-driven simulator of one training iteration (the model is documented in `tag.sim`)."""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from tag.sim.collectives import FlowSpec
from tag.cost.optimizer import FP32_BYTES, state_bytes_per_param
from tag.sim.context import _context
from tag.sim.memory import peak_memory_bytes
from tag.sim.network import INF, Flow, Network
from tag.sim.rendezvous import exchange_gates
from tag.sim.result import SimResult
from tag.sim.sfb import dw_ms, group_sfb_factors
from tag.sim.trace import COMPUTE_PID, NETWORK_PID, lane_metadata, x_event
from tag.strategy import Strategy, TrainingConfig

_FWD, _BWD, _UPD = 0, 1, 2
_KIND = ("fwd", "bwd", "update")


class _Unit:
    """One gradient sync: `nbytes` over `devices` by `method`, after the backward of `groups`."""

    __slots__ = ("groups", "devices", "nbytes", "method", "server", "label", "waiting", "ready_ms",
                 "phases", "phase", "outstanding", "upd_tasks", "start_ms", "copy_out_ms", "copied")

    def __init__(self, groups, devices, nbytes, method, server, label):
        self.groups, self.devices, self.nbytes = groups, devices, nbytes
        self.method, self.server, self.label = method, server, label
        self.waiting, self.ready_ms, self.phase, self.outstanding = 0, 0.0, 0, 0
        self.phases: list = []
        self.upd_tasks: list[int] = []
        self.start_ms = 0.0
        self.copy_out_ms, self.copied = 0.0, False


def group_syncs(gg, gid: int, decision, nbytes: float) -> list[tuple[str, float, str]]:
    """The syncs of group `gid`'s own (unshared) gradients: a list of (method, bytes, label), in order.

    This is the one place of the per-op sufficient-factor path (`tag.sim.sfb`): each op in
    ``decision.sfb`` moves its weight's bytes out of the group's sync and adds two all-gathers, of X and
    of dY over the group's rows (as deploy runs them, before the buckets).
    """
    method = decision.sync or "allreduce"
    out: list[tuple[str, float, str]] = []
    if decision.replicated:
        batch = float(sum(decision.rows))
        for f in group_sfb_factors(gg, gid, decision):
            name = gg.graph.ops[f.op_index].name
            out += [("allgather", batch * f.x_bytes_per_row, f"sfb X {name}"),
                    ("allgather", batch * f.dy_bytes_per_row, f"sfb dY {name}")]
            nbytes -= f.weight_bytes
    if nbytes > 1e-9:
        out.append((method, nbytes, f"sync g{gid}"))
    return out


def sfb_compute_ms(ctx, gid: int, decision) -> tuple[list[float], list[float]]:
    """Per device of ``decision.devices``: (backward ms saved by skipping the local dW, dW ms added before
    the optimizer step) of the group's SFB ops (`tag.sim.sfb.dw_ms`)."""
    key = (gid, decision.rows, decision.sfb)
    hit = ctx.sfb.get(key)
    if hit is None:
        devs = decision.devices
        saved, added = [0.0] * len(devs), [0.0] * len(devs)
        batch = sum(decision.rows)
        prec = getattr(ctx.training, "precision", "fp32")
        for f in group_sfb_factors(ctx.gg, gid, decision) if len(devs) > 1 else []:
            for i, d in enumerate(devs):
                dt = ctx.dtypes[d]
                saved[i] += dw_ms(f, dt, decision.rows[d], ctx.cost, prec)
                added[i] += dw_ms(f, dt, batch, ctx.cost, prec)
        hit = ctx.sfb[key] = (saved, added)
    return hit


def _shared_params(gg) -> dict[str, tuple[int, ...]]:
    """param name -> ids of the groups that consume it (GroupGraph.shared_params if present)."""
    sp = getattr(gg, "shared_params", None) or {}
    return {k: tuple(sorted(v)) for k, v in sp.items() if len(set(v)) > 1}


def _tensor_bytes(gg, name: str) -> float:
    t = gg.graph.tensors.get(name)
    return float(t.numel * t.itemsize) if t is not None and t.numel is not None else 0.0


def simulate(gg, cluster, cost, strategy: Strategy, training: TrainingConfig, *, trace: bool = False,
             overlap_sync: bool = True, blocking_sends: bool = False) -> SimResult:
    """Simulate one training iteration of `strategy`; times in ms, memory in 1e9-byte units (`SimResult`).

    `overlap_sync=False` models the `tag deploy` runtime: a device's gradient syncs start only after its
    whole backward (no DDP-style overlap of sync with the remaining backward).
    `blocking_sends=True` models its exchanges too: every transfer is a rendezvous of its two ranks at the
    consumer group's place in the group order, and blocks both (`tag.sim.rendezvous`).
    """
    n_dev, n_grp = cluster.n_devices, gg.n_groups
    decs = strategy.decisions
    if len(decs) != n_grp:
        raise ValueError(f"strategy has {len(decs)} decisions for {n_grp} groups")
    for g, dc in enumerate(decs):
        if len(dc.rows) != n_dev:
            raise ValueError(f"group {g}: row map has {len(dc.rows)} entries for {n_dev} devices")
    batch = sum(decs[0].rows) if decs else 0
    ctx = _context(gg, cluster, cost, training)
    dtypes = ctx.dtypes
    groups = gg.groups

    # ---- tasks -------------------------------------------------------------------------------------
    dur: list[float] = []
    tdev: list[int] = []
    tkind: list[int] = []
    tgrp: list[int] = []
    fwd_id: list[dict] = [None] * n_grp
    bwd_id: list[dict] = [None] * n_grp
    per_group = [ctx.group_costs(g, decs[g]) for g in range(n_grp)]
    devs_of = [pg[0] for pg in per_group]
    for g in range(n_grp):
        devs, fwd, _, _ = per_group[g]
        fwd_id[g] = dict(zip(devs, range(len(dur), len(dur) + len(devs))))
        dur += fwd; tdev += devs; tkind += [_FWD] * len(devs); tgrp += [g] * len(devs)
    sfb_upd_ms = [0.0] * n_dev  # SFB: dW over all replicas' rows, formed before the optimizer step
    for g in range(n_grp - 1, -1, -1):
        devs, _, bwd, _ = per_group[g]
        if decs[g].sfb:
            saved, added = sfb_compute_ms(ctx, g, decs[g])
            bwd = [max(0.0, b - s) for b, s in zip(bwd, saved)]
            for d, a in zip(devs, added):
                sfb_upd_ms[d] += a
        bwd_id[g] = dict(zip(devs, range(len(dur), len(dur) + len(devs))))
        dur += bwd; tdev += devs; tkind += [_BWD] * len(devs); tgrp += [g] * len(devs)
    n_compute = len(dur)
    pend = [0] * n_compute
    acts: list = [None] * n_compute

    def add_act(k, a):
        if acts[k] is None:
            acts[k] = [a]
        else:
            acts[k].append(a)

    # ---- activation and gradient transfers between groups --------------------------------------------
    recv: list[tuple] = []  # (consumer group, consumer device, producer group, producer device, bytes)
    blocking: list[tuple] = []  # blocking_sends: (phase, group, sender, receiver, FlowSpec, label, target task)
    for ei, e in enumerate(gg.edges):
        for s, d, b, fspec, bspec in ctx.edge_transfers(ei, decs[e.src], decs[e.dst]):
            kf, kb = fwd_id[e.dst][d], bwd_id[e.src][s]
            if blocking_sends:  # gated once the programs are known (below)
                blocking.append((0, e.dst, s, d, fspec, f"act g{e.src}->g{e.dst}", kf))
                blocking.append((1, e.dst, d, s, bspec, f"grad g{e.dst}->g{e.src}", kb))
            else:
                add_act(fwd_id[e.src][s], (0, fspec, kf, f"act g{e.src}->g{e.dst}"))
                add_act(bwd_id[e.dst][d], (0, bspec, kb, f"grad g{e.dst}->g{e.src}"))
            pend[kf] += 1
            pend[kb] += 1
            recv.append((e.dst, d, e.src, s, b))

    # ---- gradient syncs and optimizer updates ----------------------------------------------------------
    shared = _shared_params(gg)
    shared_by_owner: dict[int, float] = {}
    units: list[_Unit] = []
    extra_static = [0.0] * n_dev
    for pname, gids in shared.items():
        nbytes = _tensor_bytes(gg, pname)
        owner = gids[0]
        shared_by_owner[owner] = shared_by_owner.get(owner, 0.0) + nbytes
        union = tuple(sorted({d for g in gids for d in devs_of[g]}))
        for d in union:
            if d not in devs_of[owner]:  # weights, gradient and fp32 states where the owner group is absent
                extra_static[d] += 2 * nbytes + nbytes / FP32_BYTES * state_bytes_per_param(training.optimizer)
        if len(union) > 1 and nbytes > 0:
            dc = decs[owner]
            units.append(_Unit(gids, union, nbytes, dc.sync or "allreduce", dc.server, f"sync {pname}"))
    for g in range(n_grp):
        if groups[g].param_bytes > 0 and len(devs_of[g]) > 1:
            own = groups[g].param_bytes - shared_by_owner.get(g, 0.0)
            for method, nbytes, label in group_syncs(gg, g, decs[g], own):
                units.append(_Unit((g,), tuple(devs_of[g]), nbytes, method, decs[g].server, label))
    # one optimizer step per device (as optimizer.step() after backward and sync), summing its groups' updates
    in_unit = {g for u in units for g in u.groups}
    upd_ms = list(sfb_upd_ms)
    has_upd = [a > 0 for a in sfb_upd_ms]
    for g in range(n_grp):
        if groups[g].param_count > 0 or g in in_unit:
            devs, _, _, upd = per_group[g]
            for d, ms in zip(devs, upd):
                upd_ms[d] += ms
                has_upd[d] = True
    upd_id = [-1] * n_dev
    for d in range(n_dev):
        if has_upd[d]:
            upd_id[d] = len(dur)
            dur.append(upd_ms[d]); tdev.append(d); tkind.append(_UPD); tgrp.append(-1)
            pend.append(0); acts.append(None)
    join_of = [-1] * len(dur)  # the sync unit a backward task completes (others, rare, go in acts)
    last_bwd = [-1] * n_dev  # each device's last backward task in program order (backwards run g = K-1 .. 0)
    for g in range(n_grp - 1, -1, -1):
        for d, k in bwd_id[g].items():
            last_bwd[d] = k
    for j, u in enumerate(units):
        covered = set()
        for g in u.groups:
            for d in devs_of[g]:
                kb = bwd_id[g][d]
                if join_of[kb] < 0:
                    join_of[kb] = j
                else:
                    add_act(kb, (1, j))
                u.waiting += 1
                covered.add(d)
        for d in sorted(covered):
            u.upd_tasks.append(upd_id[d])
            pend[upd_id[d]] += 1
        if not overlap_sync:  # deploy: every sync also waits for the last backward task of each of its devices
            for d in u.devices:
                add_act(last_bwd[d], (1, j))
                u.waiting += 1

    # ---- per-device programs: forward in topological order, backward reversed, then updates ------------
    tdev_arr = np.asarray(tdev, dtype=np.int64)
    order = np.argsort(tdev_arr, kind="stable")  # task ids per device, in creation (program) order
    bounds = np.searchsorted(tdev_arr[order], np.arange(n_dev + 1)).tolist()
    order_l = order.tolist()
    programs: list[list[int]] = [order_l[bounds[d]:bounds[d + 1]] for d in range(n_dev)]
    ptr = [0] * n_dev
    free = [0.0] * n_dev
    ready = [0.0] * len(dur)
    start = [0.0] * len(dur)

    heap: list = []
    seq = [0]

    def push(t, kind, payload):
        seq[0] += 1
        heapq.heappush(heap, (t, seq[0], kind, payload))

    def advance(d):
        prog, i, t = programs[d], ptr[d], free[d]
        n = len(prog)
        while i < n:
            k = prog[i]
            if pend[k]:
                break
            if ready[k] > t:
                t = ready[k]
            start[k] = t
            t += dur[k]
            j = join_of[k]
            if j >= 0:
                u = units[j]
                u.waiting -= 1
                if t > u.ready_ms:
                    u.ready_ms = t
                if u.waiting == 0:
                    push(u.ready_ms, 2, j)
            a = acts[k]
            if a is not None:
                for act in a:
                    if act[0] == 0:
                        push(t, 0, (act[1], ("t", act[2]), act[3]))
                    elif act[0] == 2:  # a blocking exchange waits for both of its ranks
                        gi = act[1]
                        gate_wait[gi] -= 1
                        gate_t[gi] = max(gate_t[gi], t)
                        if gate_wait[gi] == 0:
                            push(gate_t[gi], 0, (gates[gi].spec, ("m", gates[gi].deliver), gates[gi].label))
                    else:
                        u = units[act[1]]
                        u.waiting -= 1
                        if t > u.ready_ms:
                            u.ready_ms = t
                        if u.waiting == 0:
                            push(u.ready_ms, 2, act[1])
            i += 1
        ptr[d], free[d] = i, t

    caps = [l.bytes_per_ms for l in cluster.links]
    net = Network(caps)
    link_bytes = [0.0] * len(caps)
    net_events: list = []
    comm_busy: dict[tuple, bool] = {}
    comm_queue: dict[tuple, deque] = {}

    def start_flow(spec: FlowSpec, deliver, label, t):
        for l, w in zip(spec.links, spec.weights):
            link_bytes[l] += w * spec.volume_bytes
        if not spec.links or spec.volume_bytes <= 0:
            push(t + spec.latency_ms, 1, (deliver, None))
            return
        net.add(Flow(spec.links, spec.weights, spec.volume_bytes, spec.latency_ms, deliver, label), t)

    def resolve(k, t):
        pend[k] -= 1
        if t > ready[k]:
            ready[k] = t
        if pend[k] == 0:
            advance(tdev[k])

    def start_phase(j, t):
        u = units[j]
        while u.phase < len(u.phases) and not u.phases[u.phase]:
            u.phase += 1
        if u.phase >= len(u.phases):
            if u.copy_out_ms > 0 and not u.copied:  # the ranks copy the summed bucket back into .grad
                u.copied = True
                push(t + u.copy_out_ms, 3, j)
                return
            for k in u.upd_tasks:
                resolve(k, t)
            key = u.devices
            q = comm_queue[key]
            if q:
                begin_unit(q.popleft(), t)
            else:
                comm_busy[key] = False
            return
        specs = u.phases[u.phase]
        u.outstanding = len(specs)
        for sp in specs:
            start_flow(sp, ("p", j), u.label, t)

    def begin_unit(j, t):
        u = units[j]
        u.phases = ctx.phases(u.method, u.devices, u.nbytes, u.server)
        u.phase, u.start_ms = 0, t
        copy_in, u.copy_out_ms = ctx.sync_copy_ms(u.method, u.devices, u.nbytes)
        if copy_in > 0:  # the ranks' memory work on the bucket before the collective
            push(t + copy_in, 3, j)
        else:
            start_phase(j, t)

    def handle(t, kind, payload):
        if kind == 0:
            spec, deliver, label = payload
            start_flow(spec, deliver, label, t)
        elif kind == 3:
            start_phase(payload, t)
        elif kind == 1:
            deliver = payload[0]
            if deliver[0] == "t":
                resolve(deliver[1], t)
            elif deliver[0] == "m":
                for k in deliver[1]:
                    resolve(k, t)
            else:
                u = units[deliver[1]]
                u.outstanding -= 1
                if u.outstanding == 0:
                    u.phase += 1
                    start_phase(deliver[1], t)
        else:
            key = units[payload].devices
            comm_queue.setdefault(key, deque())
            if comm_busy.get(key):
                comm_queue[key].append(payload)
            else:
                comm_busy[key] = True
                begin_unit(payload, t)

    gates = exchange_gates(programs, tgrp, [k == _FWD for k in tkind], blocking) if blocking else []
    gate_wait = [len(gt.wait) for gt in gates]
    gate_t = [0.0] * len(gates)
    for gi, gt in enumerate(gates):
        for k in gt.deliver[1:]:  # deliver[0] is the target task, already waiting for this transfer
            pend[k] += 1
        if not gt.wait:
            push(0.0, 0, (gt.spec, ("m", gt.deliver), gt.label))
        for k in gt.wait:
            add_act(k, (2, gi))
    for d in range(n_dev):
        advance(d)
    while True:
        tn = net.next_drain_ms()
        if heap and heap[0][0] <= tn:
            t = heap[0][0]
            while heap and heap[0][0] == t:  # every event at this instant before rates are recomputed
                _, _, kind, payload = heapq.heappop(heap)
                handle(t, kind, payload)
        elif tn < INF:
            for f in net.pop_drained(tn):
                if trace:
                    net_events.append((f.label, f.start_ms, tn, f.links))
                push(tn + f.latency_ms, 1, (f.payload, None))
        else:
            break

    if any(ptr[d] != len(programs[d]) for d in range(n_dev)):
        raise RuntimeError("simulation deadlock: a task waits for an input that never arrives")

    fit_ms = max(free) if free else 0.0
    busy = np.bincount(tdev_arr, weights=np.asarray(dur, dtype=float), minlength=n_dev).tolist()

    # ---- memory -------------------------------------------------------------------------------------
    ids = [d.id for d in cluster.devices]
    peak = peak_memory_bytes(ctx, decs, recv, training.optimizer, extra_static)
    peak_gb = dict(zip(ids, (peak / 1e9).tolist()))
    oom_devices = [ids[d] for d in range(n_dev) if peak[d] > dtypes[d].usable_memory_bytes]
    oom = bool(oom_devices)
    it_ms = INF if oom else fit_ms
    sps = 0.0 if oom or fit_ms <= 0 else batch / (fit_ms / 1e3)

    lb = {}
    for l, b in enumerate(link_bytes):
        if b > 0:
            key = f"{cluster.links[l].src}->{cluster.links[l].dst}"
            lb[key] = lb.get(key, 0.0) + b

    events: list[dict] = []
    if trace:
        op_names = gg.graph.ops
        for k in range(len(dur)):
            g = tgrp[k]
            if g < 0:
                events.append(x_event("update", "update", start[k], dur[k], COMPUTE_PID, tdev[k]))
                continue
            oids = groups[g].op_ids
            ops = f"{op_names[oids[0]].name}" + (f" .. {op_names[oids[-1]].name}" if len(oids) > 1 else "") if oids else ""
            events.append(x_event(f"{_KIND[tkind[k]]} g{g} {ops}".strip(), _KIND[tkind[k]], start[k], dur[k],
                                  COMPUTE_PID, tdev[k], {"group": g, "rows": decs[g].rows[tdev[k]]}))
        used_links = {}
        for label, s, e, links in net_events:
            for l in links:
                used_links[l] = f"{cluster.links[l].src}->{cluster.links[l].dst}"
                events.append(x_event(label, "comm", s, e - s, NETWORK_PID, l))
        events = lane_metadata(dict(enumerate(ids)), used_links) + events

    return SimResult(it_ms, sps, oom, oom_devices, peak_gb, dict(zip(ids, busy)), lb, events, fit_ms, batch,
                     getattr(cost, "name", ""))

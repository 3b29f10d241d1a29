"""A one-pass critical-path estimate of a strategy's iteration time, on the simulator's own task graph.

Message passing with softmax attention averages over neighbours; it cannot add up a device's load or follow
the longest chain of dependent tasks through a graph, yet both decide the iteration time. This pass spells them
out for the GNN's value head (`tag.gnn.data`). It reads the `TaskGraph` the simulator runs (`tag.sim.build`, with
the default options: asynchronous transfers, syncs overlapping the backward) but has no event queue and no
max-min sharing. It walks the compute tasks in task-id order one **stage** at a time (a run of tasks of one kind
and one group: a group's forward on all its devices, later its backward); a task ends at max(its device free, its
inputs arrived) + its duration. After a stage, the transfers its tasks produce are placed in transfer order, then
the syncs whose last awaited task it holds, phase after phase. A placed flow starts when it is ready and every
link it crosses is free, and holds those links until its bytes have drained (a link serves one flow at a time);
it arrives a latency later. Each device's optimizer step runs after its backward and the syncs covering it.
It ignores sync copy-in/out times and the order in which contending flows really interleave.

All times in ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tag.sim.build import build_task_graph
from tag.sim.collectives import FlowSpec
from tag.sim.context import SimContext, sim_context
from tag.sim.taskgraph import SyncUnit, TaskGraph, TaskKind


@dataclass(frozen=True)
class Estimate:
    """The estimate's parts, ms: iteration (the last update's end), compute of the busiest device, the
    end of the last backward, and the total time links are held by syncs and by activation transfers."""

    iteration_ms: float
    busiest_compute_ms: float
    backward_end_ms: float
    sync_busy_ms: float
    transfer_busy_ms: float


class _Links:
    """Earliest free time of every directed link; places flows one at a time."""

    def __init__(self, caps_bytes_per_ms: list[float]):
        self.bytes_per_ms = np.array(caps_bytes_per_ms, dtype=np.float64)
        self.free_ms = np.zeros(len(caps_bytes_per_ms))

    def place(self, spec: FlowSpec, ready_ms: float) -> tuple[float, float]:
        """(arrival ms, link-busy ms) of `spec` started no earlier than `ready_ms` and when its links are free."""
        if not spec.links or spec.volume_bytes <= 0:
            return ready_ms + spec.latency_ms, 0.0
        links = list(spec.links)
        start = max(ready_ms, float(self.free_ms[links].max()))
        rate = min(self.bytes_per_ms[l] / w for l, w in zip(spec.links, spec.weights))
        drain = spec.volume_bytes / rate
        self.free_ms[links] = start + drain
        return start + drain + spec.latency_ms, drain


def _stages(tg: TaskGraph) -> list[int]:
    """Stage index of every compute task (-1 for optimizer steps): consecutive ids of one kind and group."""
    kinds, groups = tg.tasks.kind, tg.tasks.group
    out, cur, prev = [], -1, None
    for k, g in zip(kinds, groups):
        if k is TaskKind.UPDATE or k is TaskKind.WAIT:
            out.append(-1)
            continue
        if (k, g) != prev:
            cur, prev = cur + 1, (k, g)
        out.append(cur)
    return out


def whole_group_syncs(ctx: SimContext, strategy, tg: TaskGraph) -> list[SyncUnit]:
    """The sync model the GNN's shipped weights were trained with (`estimate`): one sync per replicated group with
    parameters, of its whole param_bytes over its devices by its method, after its backward tasks in `tg`; no
    shared-parameter merge and no SFB split (the simulator's own units are ``tg.syncs``)."""
    bwd: dict[int, list[int]] = {}
    for k, (kind, g) in enumerate(zip(tg.tasks.kind, tg.tasks.group)):
        if kind is TaskKind.BACKWARD:
            bwd.setdefault(g, []).append(k)
    out = []
    for g, dec in enumerate(strategy.decisions):
        grp = ctx.gg.groups[g]
        devs = tuple(dec.devices)
        if grp.param_count > 0 and dec.replicated and grp.param_bytes > 0:  # a shard with one replica: none
            nbytes = float(grp.param_bytes)
            method = "ring" if dec.sync in (None, "auto") else dec.sync  # the trained model knew no cost choice
            out.append(SyncUnit((g,), devs, nbytes, method, dec.server, f"sync g{g}", wait=list(bwd[g]),
                                phases=ctx.phases(method, devs, nbytes, dec.server)))
    return out


def critical_path(tg: TaskGraph, caps_bytes_per_ms: list[float], syncs: list[SyncUnit] | None = None) -> Estimate:
    """The critical-path estimate of task graph `tg` on links of these capacities (module docstring); `syncs`
    replaces ``tg.syncs`` (the units' wait, phases and devices are read)."""
    tasks = tg.tasks
    n_tasks = len(tasks)
    stage = _stages(tg)
    n_stages = max(stage, default=-1) + 1
    transfers_after: list[list] = [[] for _ in range(n_stages)]
    for x in tg.transfers:
        transfers_after[stage[x.producer]].append(x)
    syncs_after: list[list] = [[] for _ in range(n_stages)]
    for u in tg.syncs if syncs is None else syncs:
        if u.wait:
            syncs_after[max(stage[k] for k in u.wait)].append(u)
    links = _Links(caps_bytes_per_ms)
    free = np.zeros(tg.n_devices)
    busy = np.zeros(tg.n_devices)
    arrival = [0.0] * n_tasks
    end = [0.0] * n_tasks
    sync_done = np.zeros(tg.n_devices)
    transfer_busy = sync_busy = 0.0
    k = 0
    while k < n_tasks:
        s = stage[k]
        if s < 0:  # optimizer steps come last; they are added below
            k += 1
            continue
        while k < n_tasks and stage[k] == s:
            d, ms = tasks.device[k], tasks.duration_ms[k]
            end[k] = free[d] = max(free[d], arrival[k]) + ms
            busy[d] += ms
            k += 1
        for x in transfers_after[s]:
            arrive, held = links.place(x.spec, end[x.producer])
            transfer_busy += held
            arrival[x.consumer] = max(arrival[x.consumer], arrive)
        for u in syncs_after[s]:
            t = max(end[w] for w in u.wait)
            for phase in u.phases:
                ends = [links.place(spec, t) for spec in phase]
                sync_busy += sum(h for _, h in ends)
                t = max(a for a, _ in ends)
            for d in u.devices:
                sync_done[d] = max(sync_done[d], t)
    upd = np.zeros(tg.n_devices)
    for k in range(n_tasks):
        if stage[k] < 0:
            upd[tasks.device[k]] += tasks.duration_ms[k]
    finish = np.maximum(free, sync_done) + upd
    return Estimate(float(finish.max()), float(busy.max()), float(free.max()), sync_busy, transfer_busy)


def estimate(gg, cluster, cost, strategy, training) -> Estimate:
    """The critical-path estimate (`Estimate`, ms) of one iteration of `strategy` (module docstring)."""
    ctx = sim_context(gg, cluster, cost, training)
    tg = build_task_graph(ctx, strategy)
    return critical_path(tg, [l.bytes_per_ms for l in cluster.links], whole_group_syncs(ctx, strategy, tg))

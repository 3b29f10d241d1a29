"""The builder: (GroupGraph, Cluster, CostModel, Strategy, TrainingConfig, options) -> `TaskGraph`.

Pure apart from the per-(gg, cluster, cost, training) caches of `tag.sim.context`. The model it builds is
documented in `tag.sim` (tasks, transfers, gradient syncs, optimizer steps, program order); the task graph's
fields in `tag.sim.taskgraph`. Pipelined strategies (micro-batches in a schedule) are built by
`tag.sim.pipeline_build` from this module's parts. A new strategy kind (shards, collectives, buckets) adds
builder code and leaves the event loop (`tag.sim.events`) as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tag.cost.optimizer import FP32_BYTES, state_bytes_per_param
from tag.sim.batch_stats import batch_stat_units
from tag.sim.context import SimContext
from tag.sim.gradsync import group_sfb_syncs, sfb_compute_ms, shared_params, sync_method, tensor_bytes
from tag.sim.rendezvous import exchange_gates
from tag.sim.taskgraph import ComputeTasks, DependentKind, MemoryInputs, SyncUnit, TaskGraph, TaskKind, Transfer

_TRANSFER, _SYNC = DependentKind.TRANSFER, DependentKind.SYNC


@dataclass(frozen=True)
class BuildOptions:
    """How the runtime being modelled runs an iteration.

    overlap_sync=False: a sync also waits until each of its devices has finished its whole backward (the `tag
    deploy` runtime); blocking_sends=True: every transfer is a rendezvous of its two ranks at the consumer group's
    place in the group order and blocks both (`tag.sim.rendezvous`)."""

    overlap_sync: bool = True
    blocking_sends: bool = False


def check_strategy(strategy, n_groups: int, n_devices: int) -> None:
    """ValueError unless the strategy has one decision per group, each with one row count per device."""
    decs = strategy.decisions
    if len(decs) != n_groups:
        raise ValueError(f"strategy has {len(decs)} decisions for {n_groups} groups")
    for g, dc in enumerate(decs):
        if len(dc.rows) != n_devices:
            raise ValueError(f"group {g}: row map has {len(dc.rows)} entries for {n_devices} devices")


@dataclass
class _Draft:
    """The graph under construction: tasks, per-task input counts, first syncs and dependents (`TaskGraph`)."""

    tasks: ComputeTasks
    inputs: list[int]
    first_sync: list[int]
    dependents: list[list | None]

    def add_tasks(self, devices: list[int], kind: TaskKind, group: int, durations_ms: list[float]) -> range:
        ids = self.tasks.add(devices, kind, group, durations_ms)
        n = len(ids)
        self.inputs += [0] * n
        self.first_sync += [-1] * n
        self.dependents += [None] * n
        return ids

    def depend(self, task: int, ref: tuple) -> None:
        """Add `ref` to the task's dependents, last."""
        a = self.dependents[task]
        if a is None:
            self.dependents[task] = [ref]
        else:
            a.append(ref)


def _compute_tasks(ctx: SimContext, decs, draft: _Draft) -> tuple[list[dict], list[dict], list[float], list]:
    """Forward tasks in group order, then backward tasks in reverse group order (SFB: the local dW leaves the
    backward). (forward task ids per group {device: task}, backward likewise, SFB dW ms per device, the cached
    per-group costs)."""
    n_grp = len(decs)
    per_group = [ctx.group_costs(g, decs[g]) for g in range(n_grp)]
    fwd_id: list[dict] = [None] * n_grp
    bwd_id: list[dict] = [None] * n_grp
    for g in range(n_grp):
        devs, fwd, _, _ = per_group[g]
        fwd_id[g] = dict(zip(devs, draft.add_tasks(devs, TaskKind.FORWARD, g, fwd)))
    sfb_upd_ms = [0.0] * len(ctx.dtypes)  # SFB: dW over all replicas' rows, formed before the optimizer step
    for g in range(n_grp - 1, -1, -1):
        devs, _, bwd, _ = per_group[g]
        if decs[g].sfb:
            saved, added = sfb_compute_ms(ctx, g, decs[g])
            bwd = [max(0.0, b - s) for b, s in zip(bwd, saved)]
            for d, a in zip(devs, added):
                sfb_upd_ms[d] += a
        bwd_id[g] = dict(zip(devs, draft.add_tasks(devs, TaskKind.BACKWARD, g, bwd)))
    return fwd_id, bwd_id, sfb_upd_ms, per_group


def _transfers(ctx: SimContext, decs, fwd_id, bwd_id, draft: _Draft, asynchronous: bool):
    """Per edge and device pair: the activation slice (producer forward -> consumer forward) and the gradient
    back (consumer backward -> producer backward); ([Transfer], memory recv list)."""
    out: list[Transfer] = []
    recv: list[tuple] = []
    for ei, e in enumerate(ctx.gg.edges):
        for s, d, b, fspec, bspec in ctx.edge_transfers(ei, decs[e.src], decs[e.dst]):
            pf, kf = fwd_id[e.src][s], fwd_id[e.dst][d]
            pb, kb = bwd_id[e.dst][d], bwd_id[e.src][s]
            if asynchronous:  # blocking exchanges get their wait and deliver once programs are known
                draft.depend(pf, (_TRANSFER, len(out)))
                draft.depend(pb, (_TRANSFER, len(out) + 1))
            out.append(Transfer(fspec, pf, kf, (pf,), (kf,), f"act g{e.src}->g{e.dst}"))
            out.append(Transfer(bspec, pb, kb, (pb,), (kb,), f"grad g{e.dst}->g{e.src}"))
            draft.inputs[kf] += 1
            draft.inputs[kb] += 1
            recv.append((e.dst, d, e.src, s, b))
    return out, recv


def _sync_units(ctx: SimContext, strategy, devs_of) -> tuple[list[SyncUnit], list[float]]:
    """Shared parameters' syncs (over the union of their groups' devices), then for each group in id order its SFB
    all-gathers (`group_sfb_syncs`) and, at the lowest group of a bucket (the last whose gradients become ready),
    that bucket's sync (`SimContext.bucket_syncs`); and per device the persistent bytes of shared parameters held
    where their owner group is absent."""
    gg, training, decs = ctx.gg, ctx.training, strategy.decisions
    units: list[SyncUnit] = []
    extra_static = [0.0] * len(ctx.dtypes)
    for pname, gids in shared_params(gg).items():
        nbytes = tensor_bytes(gg, pname)
        owner = gids[0]
        union = tuple(sorted({d for g in gids for d in devs_of[g]}))
        for d in union:
            if d not in devs_of[owner]:  # weights, gradient and fp32 states where the owner group is absent
                extra_static[d] += 2 * nbytes + nbytes / FP32_BYTES * state_bytes_per_param(training.optimizer)
        if len(union) > 1 and nbytes > 0:
            dc = decs[owner]
            method = ctx.resolve_method(sync_method(dc), union, nbytes)
            units.append(SyncUnit(gids, union, nbytes, method, dc.server, f"sync {pname}"))
    at_lowest = {min(b.bucket.groups): b for b in ctx.bucket_syncs(strategy)}
    for g in range(len(decs)):
        for method, nbytes, label in group_sfb_syncs(gg, g, decs[g]):
            units.append(SyncUnit((g,), tuple(devs_of[g]), nbytes, method, None, label))
        b = at_lowest.get(g)
        if b is not None:
            gs = b.bucket.groups
            label = f"sync g{gs[0]}" if len(gs) == 1 else f"bucket g{gs[0]}..g{gs[-1]}"
            units.append(SyncUnit(gs, b.devices, b.nbytes, b.bucket.algorithm, b.bucket.server, label))
    for u in units:
        u.phases = ctx.phases(u.method, u.devices, u.nbytes, u.server)
        u.copy_in_ms, u.copy_out_ms = ctx.sync_copy_ms(u.method, u.devices, u.nbytes)
    return units, extra_static


def _update_tasks(ctx: SimContext, units, per_group, sfb_upd_ms, draft: _Draft) -> list[int]:
    """One optimizer step per device that holds parameters (as optimizer.step() after backward and sync), lasting
    its SFB dW products plus the update of every group it computes that has parameters or syncs; task id per
    device (-1: none)."""
    n_dev = len(ctx.dtypes)
    groups = ctx.gg.groups
    in_unit = {g for u in units for g in u.groups}
    upd_ms = list(sfb_upd_ms)
    has_upd = [a > 0 for a in sfb_upd_ms]
    for g in range(len(per_group)):
        if groups[g].param_count > 0 or g in in_unit:
            devs, _, _, upd = per_group[g]
            for d, ms in zip(devs, upd):
                upd_ms[d] += ms
                has_upd[d] = True
    return [draft.add_tasks([d], TaskKind.UPDATE, -1, [upd_ms[d]])[0] if has_upd[d] else -1 for d in range(n_dev)]


def _wire_syncs(units, devs_of, bwd_id, upd_id, draft: _Draft, overlap_sync: bool) -> None:
    """Each sync waits for its groups' backward tasks (without overlap also for the last backward task of each of
    its devices) and releases the optimizer steps of the devices computing its groups."""
    n_dev = len(upd_id)
    last_bwd = [-1] * n_dev  # each device's last backward task in program order (backwards run g = K-1 .. 0)
    for g in range(len(bwd_id) - 1, -1, -1):
        for d, k in bwd_id[g].items():
            last_bwd[d] = k
    first, inputs = draft.first_sync, draft.inputs
    for j, u in enumerate(units):
        for g in u.groups:
            ids = bwd_id[g]
            kbs = [ids[d] for d in devs_of[g]]
            u.wait += kbs
            for kb in kbs:
                if first[kb] < 0:
                    first[kb] = j
                else:
                    draft.depend(kb, (_SYNC, j))
        # devices in topology order (a group's devices are)
        covered = devs_of[u.groups[0]] if len(u.groups) == 1 else sorted({d for g in u.groups for d in devs_of[g]})
        u.release = [upd_id[d] for d in covered]
        for k in u.release:
            inputs[k] += 1
        if not overlap_sync:
            for d in u.devices:
                draft.depend(last_bwd[d], (_SYNC, j))
                u.wait.append(last_bwd[d])


def _wire_batch_stats(ctx: SimContext, decs, fwd_maps, bwd_maps, units, programs, draft: _Draft) -> None:
    """Append the batch-statistics syncs of training-mode BatchNormalization (`tag.sim.batch_stats`) to `units`:
    each waits for its group's pass on every replica and holds back each replica's next task in program order.
    fwd_maps / bwd_maps: per group, a list of {device: task id} (one per micro-batch)."""
    found = batch_stat_units(ctx, decs, fwd_maps, bwd_maps)
    if not found:
        return
    pos = {k: (d, i) for d, prog in enumerate(programs) for i, k in enumerate(prog)}
    first, inputs = draft.first_sync, draft.inputs
    for g, kind, devs, tasks, phases, nbytes in found:
        j = len(units)
        u = SyncUnit((g,), devs, nbytes, "ring", None, f"sync bn-stats g{g} {kind}")
        u.phases = phases
        for d in devs:
            k = tasks[d]
            u.wait.append(k)
            if first[k] < 0:
                first[k] = j
            else:
                draft.depend(k, (_SYNC, j))
            dd, i = pos[k]
            if i + 1 < len(programs[dd]):
                u.release.append(programs[dd][i + 1])
                inputs[programs[dd][i + 1]] += 1
        units.append(u)


def _programs(devices: list[int], n_dev: int) -> list[list[int]]:
    """Each device's task ids in creation order: forwards by group, backwards by group reversed, its step."""
    dev = np.asarray(devices, dtype=np.int64)
    order = np.argsort(dev, kind="stable")
    bounds = np.searchsorted(dev[order], np.arange(n_dev + 1)).tolist()
    order_l = order.tolist()
    return [order_l[bounds[d]:bounds[d + 1]] for d in range(n_dev)]


def _blocking(transfers: list[Transfer], programs, tasks: ComputeTasks, draft: _Draft) -> list[Transfer]:
    """The transfers as blocking exchanges (`tag.sim.rendezvous.exchange_gates`): each waits for both ranks to
    reach the consumer group's exchange and delivers to the next task of each."""
    fwd = TaskKind.FORWARD
    req = []
    for x in transfers:
        forward = tasks.kind[x.producer] == fwd  # an activation (forward) or a gradient (backward) exchange
        group = tasks.group[x.consumer] if forward else tasks.group[x.producer]  # where the exchange sits
        req.append((0 if forward else 1, group, tasks.device[x.producer], tasks.device[x.consumer], x.spec,
                    x.label, x.consumer))
    gates = exchange_gates(programs, tasks.group, [k == fwd for k in tasks.kind], req)
    out = []
    for i, (x, gt) in enumerate(zip(transfers, gates)):
        for k in gt.deliver[1:]:  # deliver[0] is the consumer, already counted
            draft.inputs[k] += 1
        for k in gt.wait:
            draft.depend(k, (_TRANSFER, i))
        out.append(Transfer(x.spec, x.producer, x.consumer, gt.wait, gt.deliver, x.label))
    return out


def build_task_graph(ctx: SimContext, strategy, options: BuildOptions = BuildOptions()) -> TaskGraph:
    """The task graph of one iteration of `strategy` on ctx's (gg, cluster, cost, training) (module docstring);
    a pipelined strategy's is `tag.sim.pipeline_build.build_pipeline_task_graph`'s."""
    if getattr(strategy, "pipeline", None) is not None:
        from tag.sim.pipeline_build import build_pipeline_task_graph  # it builds on this module's parts

        return build_pipeline_task_graph(ctx, strategy, options)
    n_dev, decs = len(ctx.dtypes), strategy.decisions
    check_strategy(strategy, ctx.gg.n_groups, n_dev)
    draft = _Draft(ComputeTasks(), [], [], [])
    fwd_id, bwd_id, sfb_upd_ms, per_group = _compute_tasks(ctx, decs, draft)
    devs_of = [pg[0] for pg in per_group]
    transfers, recv = _transfers(ctx, decs, fwd_id, bwd_id, draft, not options.blocking_sends)
    units, extra_static = _sync_units(ctx, strategy, devs_of)
    upd_id = _update_tasks(ctx, units, per_group, sfb_upd_ms, draft)
    _wire_syncs(units, devs_of, bwd_id, upd_id, draft, options.overlap_sync)
    programs = _programs(draft.tasks.device, n_dev)
    _wire_batch_stats(ctx, decs, [[m] for m in fwd_id], [[m] for m in bwd_id], units, programs, draft)
    if options.blocking_sends:
        transfers = _blocking(transfers, programs, draft.tasks, draft)
    return TaskGraph(n_dev, draft.tasks, programs, transfers, units, draft.inputs, draft.first_sync, draft.dependents,
                     MemoryInputs(recv, extra_static), sum(decs[0].rows) if decs else 0)

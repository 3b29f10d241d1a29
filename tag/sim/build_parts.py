"""The parts both task-graph builders share (`tag.sim.build` for whole-batch strategies, `tag.sim.pipeline_build`
for micro-batched pipelines): the build options, the strategy check, the graph under construction (`Draft`),
gradient sync units and their wiring, optimizer steps, batch-statistics syncs and each device's program order.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from tag.sim.batch_stats import batch_stat_units
from tag.sim.context import SimContext
from tag.sim.gradsync import group_sfb_syncs, shared_params, sync_method, tensor_bytes
from tag.sim.memory import shared_static_bytes
from tag.sim.shards import shard_edge_transfers
from tag.sim.taskgraph import ComputeTasks, DependentKind, SyncUnit, TaskKind, Transfer
from tag.sim.tensor_sends import Send
from tag.sim.zero import bucket_method, count_towards, update_fractions, uses_zero

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
class Draft:
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

def with_recompute(decision, fwd_ms: list[float], bwd_ms: list[float]) -> list[float]:
    """Backward ms per device of a group (`Decision.recompute`): its forward runs again at the start of its backward
    (bwd + fwd), else bwd unchanged.

    >>> from tag.strategy import Decision
    >>> with_recompute(Decision((2,), recompute=True), [1.0], [2.0]), with_recompute(Decision((2,)), [1.0], [2.0])
    ([3.0], [2.0])
    """
    return [b + f for f, b in zip(fwd_ms, bwd_ms)] if decision.recompute else bwd_ms

def sync_units(ctx: SimContext, strategy, devs_of) -> tuple[list[SyncUnit], list[float]]:
    """Shared parameters' syncs (over the union of their groups' devices), then for each group in id order its SFB
    all-gathers (`group_sfb_syncs`) and, at the lowest group of a bucket (the last whose gradients become ready),
    that bucket's sync (`SimContext.bucket_syncs`); and per device the persistent bytes of shared parameters held
    where their owner group is absent."""
    gg, training, decs = ctx.gg, ctx.training, strategy.decisions
    units: list[SyncUnit] = []
    extra_static = shared_static_bytes(gg, devs_of, training.optimizer, len(ctx.dtypes))
    for pname, gids in shared_params(gg).items():
        nbytes = tensor_bytes(gg, pname)
        owner = gids[0]
        union = tuple(sorted({d for g in gids for d in devs_of[g]}))
        if len(union) > 1 and nbytes > 0:
            dc = decs[owner]
            method = ctx.resolve_method(sync_method(dc), union, nbytes)
            units.append(SyncUnit(gids, union, nbytes, method, dc.server, f"sync {pname}"))
    at_lowest = {min(b.bucket.groups): b for b in ctx.bucket_syncs(strategy)}
    precision = getattr(training, "precision", "fp32")
    for g in range(len(decs)):
        for method, nbytes, label in group_sfb_syncs(gg, g, decs[g], precision):
            units.append(SyncUnit((g,), tuple(devs_of[g]), nbytes, method, None, label))
        b = at_lowest.get(g)
        if b is not None:
            gs = b.bucket.groups
            zero = decs[gs[0]].zero
            label = f"sync g{gs[0]}" if len(gs) == 1 else f"bucket g{gs[0]}..g{gs[-1]}"
            if zero:
                label = "reduce-scatter " + label.split(" ", 1)[1]
            method = bucket_method(b.bucket.algorithm, zero)
            if b.positions:  # sharded groups: one collective per position over its peers (`tag.sim.shards`)
                units += [SyncUnit(gs, peers, nbytes, method, None, f"{label} p{j}")
                          for j, (peers, nbytes) in enumerate(b.positions) if nbytes > 0]
            else:
                units.append(SyncUnit(gs, b.devices, b.nbytes, method, b.bucket.server, label))
    for u in units:
        u.phases = ctx.phases(u.method, u.devices, u.nbytes, u.server)
        u.copy_in_ms, u.copy_out_ms = ctx.sync_copy_ms(u.method, u.devices, u.nbytes)
    return units, extra_static

def made_positions(devs: list[int], kept: list[int]) -> list[int]:
    """The positions in `devs` (ascending device indices, a group's) of the devices of `kept` (ascending): those
    whose tasks a folded build makes (`tag.sim.build.build_task_graph`'s rep).

    >>> made_positions([0, 2, 3, 5], [2, 4, 5])
    [1, 3]
    """
    out = []
    for d in kept:
        i = bisect_left(devs, d)
        if i < len(devs) and devs[i] == d:
            out.append(i)
    return out


def update_tasks(ctx: SimContext, units, per_group, extra_upd_ms, draft: Draft, decisions,
                 kept: list[int] | None = None) -> list[int]:
    """One optimizer step per device that holds parameters (as optimizer.step() after backward and sync), lasting
    its `extra_upd_ms` (SFB dW products, ZeRO stage 1's fresh master gradients) plus the update of every group it
    computes that has parameters or syncs (under ZeRO, the replica's share of it, `tag.sim.zero.update_fractions`);
    task id per device (-1: none, or a device left out of `kept`, the devices whose tasks are made, ascending)."""
    n_dev = len(ctx.dtypes)
    groups = ctx.gg.groups
    in_unit = {g for u in units for g in u.groups}
    upd_ms = list(extra_upd_ms)
    has_upd = [a > 0 for a in extra_upd_ms]
    frac = update_fractions(ctx.gg, decisions) if uses_zero(decisions) else None
    for g in range(len(per_group)):
        if groups[g].param_count > 0 or g in in_unit:
            devs, _, _, upd = per_group[g]
            pairs = zip(devs, upd) if kept is None else ((devs[i], upd[i]) for i in made_positions(devs, kept))
            for d, ms in pairs:
                upd_ms[d] += ms if frac is None else ms * frac[g]
                has_upd[d] = True
    if kept is not None:
        made = set(kept)
        has_upd = [h and d in made for d, h in enumerate(has_upd)]
    return [draft.add_tasks([d], TaskKind.UPDATE, -1, [upd_ms[d]])[0] if has_upd[d] else -1 for d in range(n_dev)]

def wire_syncs(units, devs_of, bwd_id, upd_id, draft: Draft, overlap_sync: bool) -> None:
    """Each sync waits for its groups' backward tasks (without overlap also for the last backward task of each of
    its devices) and releases the optimizer steps of the devices computing its groups (of those whose tasks were
    made: `bwd_id` and `upd_id` name no others)."""
    n_dev = len(upd_id)
    last_bwd = [-1] * n_dev  # each device's last backward task in program order (backwards run g = K-1 .. 0)
    for g in range(len(bwd_id) - 1, -1, -1):
        for d, k in bwd_id[g].items():
            last_bwd[d] = k
    inputs, first = draft.inputs, draft.first_sync
    for j, u in enumerate(units):
        members = set(u.devices)  # a sharded group's position unit: its peers only
        for g in u.groups:
            kbs = [k for d, k in bwd_id[g].items() if d in members]  # devs_of[g]'s order
            u.wait += kbs
            for kb in kbs:  # `count_towards`, inline: one call per backward task of every device
                if first[kb] < 0:
                    first[kb] = j
                else:
                    draft.depend(kb, (_SYNC, j))
        # devices in topology order (a group's devices are)
        covered = devs_of[u.groups[0]] if len(u.groups) == 1 else sorted({d for g in u.groups for d in devs_of[g]})
        u.release = [upd_id[d] for d in covered if d in members and upd_id[d] >= 0]
        for k in u.release:
            inputs[k] += 1
        if not overlap_sync:
            for d in u.devices:
                if last_bwd[d] >= 0:
                    draft.depend(last_bwd[d], (_SYNC, j))
                    u.wait.append(last_bwd[d])

def wire_batch_stats(ctx: SimContext, decs, fwd_maps, bwd_maps, units, programs, draft: Draft) -> None:
    """Append the batch-statistics syncs of training-mode BatchNormalization (`tag.sim.batch_stats`) to `units`:
    each waits for its group's pass on every replica and holds back each replica's next task in program order.
    fwd_maps / bwd_maps: per group, a list of {device: task id} (one per micro-batch)."""
    found = batch_stat_units(ctx, decs, fwd_maps, bwd_maps)
    if not found:
        return
    pos = {k: (d, i) for d, prog in enumerate(programs) for i, k in enumerate(prog)}
    inputs = draft.inputs
    for g, kind, devs, tasks, phases, nbytes in found:
        j = len(units)
        u = SyncUnit((g,), devs, nbytes, "ring", None, f"sync bn-stats g{g} {kind}")
        u.phases = phases
        for d in devs:
            k = tasks.get(d)
            if k is None:  # a device whose tasks were not made
                continue
            u.wait.append(k)
            count_towards(draft, k, j)
            dd, i = pos[k]
            if i + 1 < len(programs[dd]):
                u.release.append(programs[dd][i + 1])
                inputs[programs[dd][i + 1]] += 1
        units.append(u)

def device_programs(devices: list[int], n_dev: int) -> list[list[int]]:
    """Each device's task ids in creation order: forwards by group, backwards by group reversed, its step."""
    dev = np.asarray(devices, dtype=np.int64)
    order = np.argsort(dev, kind="stable")
    bounds = np.searchsorted(dev[order], np.arange(n_dev + 1)).tolist()
    order_l = order.tolist()
    return [order_l[bounds[d]:bounds[d + 1]] for d in range(n_dev)]


def edge_flows(ctx: SimContext, ei: int, producer, consumer, decisions) -> tuple[list, list, list, bool]:
    """([(src, dst, FlowSpec)] forward, [(src, dst, FlowSpec)] backward, [(src, dst, bytes)] for the memory pass,
    paired) of edge ei between two decisions: `SimContext.edge_transfers` (paired: the backward is the forward's
    pairs reversed, entry by entry), or with a sharded end `tag.sim.shards.shard_edge_transfers`."""
    if producer.shard is not None or consumer.shard is not None:
        return (*shard_edge_transfers(ctx, ei, producer, consumer, decisions), False)
    both = ctx.edge_transfers(ei, producer, consumer)
    return ([(s, d, f) for s, d, _, f, _ in both], [(d, s, b) for s, d, _, _, b in both],
            [(s, d, b) for s, d, b, _, _ in both], True)


def add_edge_transfers(draft: Draft, out: list, recv: list | None, e, flows, maps, label: str,
                       asynchronous: bool = True) -> None:
    """Append the transfers of edge e for one pass to `out` (and, given `recv`, its memory pairs): activations from
    the producer's forward tail to the consumer's forward head, gradients from the consumer's backward tail to the
    producer's backward head. flows: `edge_flows`; maps: ({device: task} forward tails of e.src, forward heads of
    e.dst, backward tails of e.dst, backward heads of e.src). A paired edge interleaves each activation with its
    gradient. asynchronous: each transfer starts when its producer ends (else `tag.sim.build` gates it later)."""
    fwd, bwd, mem, paired = flows
    f_out, f_in, b_out, b_in = maps
    act, grad = f"act g{e.src}->g{e.dst}{label}", f"grad g{e.dst}->g{e.src}{label}"
    inputs = draft.inputs
    if paired:
        for (s, d, fspec), (_, _, bspec), (_, _, b) in zip(fwd, bwd, mem):
            pf, kf, pb, kb = f_out[s], f_in[d], b_out[d], b_in[s]
            if asynchronous:
                draft.depend(pf, (_TRANSFER, len(out)))
                draft.depend(pb, (_TRANSFER, len(out) + 1))
            out.append(Transfer(fspec, pf, kf, (pf,), (kf,), act))
            out.append(Transfer(bspec, pb, kb, (pb,), (kb,), grad))
            inputs[kf] += 1
            inputs[kb] += 1
            if recv is not None:
                recv.append((e.dst, d, e.src, s, b))
        return
    for pairs, src_of, dst_of, what in ((fwd, f_out, f_in, act), (bwd, b_out, b_in, grad)):
        for s, d, spec in pairs:
            p, k = src_of[s], dst_of[d]
            if asynchronous:
                draft.depend(p, (_TRANSFER, len(out)))
            out.append(Transfer(spec, p, k, (p,), (k,), what))
            inputs[k] += 1
    if recv is not None:
        recv += [(e.dst, d, e.src, s, b) for s, d, b in mem]


def add_planned_transfers(draft: Draft, out: list, recv: list | None, gg, plan: list, maps, label: str,
                          asynchronous: bool = True) -> None:
    """Append the transfers of one pass of `plan` (`tag.sim.tensor_sends.transfer_plan`) to `out` (and, given `recv`,
    its memory pairs). maps: per group, ({device: task} forward tails, forward heads, backward tails, backward heads).
    A `Send` is one activation message from the producer's forward tail on src delivering to the forward head of
    each reader on dst, interleaved with one gradient message that waits for every reader's backward tail on dst and
    delivers to the producer's backward head on src; its memory pair is held by the lowest reader. An `EdgeFlows`
    entry is `add_edge_transfers`."""
    f_out, f_in, b_out, b_in = maps
    inputs = draft.inputs
    for x in plan:
        if not isinstance(x, Send):
            e = gg.edges[x.edge]
            add_edge_transfers(draft, out, recv, e, x.flows, (f_out[e.src], f_in[e.dst], b_out[e.dst], b_in[e.src]),
                               label, asynchronous)
            continue
        a, s, d, hs = x.producer, x.src, x.dst, x.readers
        names = "+".join(f"g{h}" for h in hs)
        pf, kb = f_out[a][s], b_in[a][s]
        heads = tuple(f_in[h][d] for h in hs)
        tails = tuple(b_out[h][d] for h in hs)
        if asynchronous:
            draft.depend(pf, (_TRANSFER, len(out)))
            for t in tails:
                draft.depend(t, (_TRANSFER, len(out) + 1))
        out.append(Transfer(x.fwd, pf, heads[0], (pf,), heads, f"act g{a}->{names}{label}"))
        out.append(Transfer(x.bwd, tails[0], kb, tails, (kb,), f"grad {names}->g{a}{label}"))
        for k in heads:
            inputs[k] += 1
        inputs[kb] += 1
        if recv is not None:
            recv.append((hs[0], d, a, s, x.nbytes))

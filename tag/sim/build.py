"""The builder: (GroupGraph, Cluster, CostModel, Strategy, TrainingConfig, options) -> `TaskGraph`.

Pure apart from the per-(gg, cluster, cost, training) caches of `tag.sim.context`. The model it builds is
documented in `tag.sim` (tasks, transfers, gradient syncs, optimizer steps, program order); the task graph's
fields in `tag.sim.taskgraph`. Pipelined strategies (micro-batches in a schedule) are built by
`tag.sim.pipeline_build` from the shared parts in `tag.sim.build_parts`. A new strategy kind (shards, collectives, buckets) adds
builder code and leaves the event loop (`tag.sim.events`) as it is.
"""

from __future__ import annotations

from tag.sim.build_parts import (BuildOptions, Draft, add_planned_transfers, check_strategy, device_programs, edge_flows,
                                 made_positions, sync_units, update_tasks, wire_batch_stats, wire_syncs,
                                 with_recompute)
from tag.sim.context import SimContext
from tag.sim.gradsync import sfb_compute_ms
from tag.sim.pipeline_build import build_pipeline_task_graph
from tag.sim.rendezvous import exchange_gates
from tag.sim.shard_build import add_tails, wire_collectives
from tag.sim.taskgraph import ComputeTasks, DependentKind, MemoryInputs, TaskGraph, TaskKind, Transfer
from tag.sim.tensor_sends import transfer_plan
from tag.sim.zero import add_gathers_after_update, add_weight_gathers, zero_fill_ms

__all__ = ["BuildOptions", "build_task_graph", "check_strategy"]

_TRANSFER, _SYNC = DependentKind.TRANSFER, DependentKind.SYNC


def _compute_tasks(ctx: SimContext, decs, draft: Draft, pending: list, kept: list[int] | None = None) -> tuple:
    """Forward tasks in group order, then backward tasks in reverse group order (SFB: the local dW leaves the
    backward; recompute: the forward runs again at its start, `with_recompute`; a sharded group's collectives: a
    tail task after each pass, `tag.sim.shard_build`, appended to `pending`; ZeRO's fresh buffers,
    `tag.sim.zero.zero_fill_ms`). (forward task ids per group {device: task}, the same for what leaves each forward
    (its tails), backward likewise twice, SFB dW and ZeRO master-gradient ms per device, the per-group costs).
    kept: the devices whose tasks are made, ascending (None: every device's; `made_positions`)."""
    n_grp = len(decs)
    base = [ctx.group_costs(g, decs[g]) for g in range(n_grp)]
    per_group = list(base)
    # before each device's optimizer step, not shares of the update (`update_fractions`): SFB's dW over all
    # replicas' rows, ZeRO stage 1's fresh master gradients
    extra_upd_ms = [0.0] * len(ctx.dtypes)
    for g, fill in enumerate(zero_fill_ms(ctx, decs, base) or ()):  # ZeRO's fresh buffers on CPU ranks
        if fill is not None:
            devs, fwd, bwd, upd = base[g]
            per_group[g] = (devs, [a + b for a, b in zip(fwd, fill[0])], [a + b for a, b in zip(bwd, fill[1])], upd)
            for d, ms in zip(devs, fill[2]):
                extra_upd_ms[d] += ms
    fwd_id: list[dict] = [None] * n_grp
    bwd_id: list[dict] = [None] * n_grp
    fwd_out: list[dict] = [None] * n_grp
    bwd_out: list[dict] = [None] * n_grp
    for g in range(n_grp):
        devs, fwd, _, _ = _made(per_group[g], kept)
        fwd_id[g] = dict(zip(devs, draft.add_tasks(devs, TaskKind.FORWARD, g, fwd)))
        fwd_out[g] = add_tails(ctx, decs, g, TaskKind.FORWARD, fwd_id[g], draft, pending)
    for g in range(n_grp - 1, -1, -1):
        devs, fwd, bwd, _ = per_group[g]
        if decs[g].sfb:
            saved, added = sfb_compute_ms(ctx, g, decs[g])
            bwd = [max(0.0, b - s) for b, s in zip(bwd, saved)]
            for d, a in zip(devs, added):
                extra_upd_ms[d] += a
        bwd = with_recompute(decs[g], base[g][1], bwd)  # the forward again, not its gather's fresh buffer
        devs, bwd = _made((devs, bwd), kept)
        bwd_id[g] = dict(zip(devs, draft.add_tasks(devs, TaskKind.BACKWARD, g, bwd)))
        bwd_out[g] = add_tails(ctx, decs, g, TaskKind.BACKWARD, bwd_id[g], draft, pending)
    return fwd_id, fwd_out, bwd_id, bwd_out, extra_upd_ms, per_group


def _made(columns: tuple, kept: list[int] | None) -> tuple:
    """(devices, per-device values...) of one group with only the devices whose tasks are made (`kept`)."""
    if kept is None:
        return columns
    idx = made_positions(columns[0], kept)
    return tuple([col[i] for i in idx] for col in columns)


def _transfers(ctx: SimContext, decs, passes, draft: Draft, asynchronous: bool, plan: list | None = None):
    """Per tensor message (`tag.sim.tensor_sends`): the activation slice (producer forward -> consumer forwards) and
    the gradient back (consumer backwards -> producer backward) (`add_planned_transfers`); ([Transfer], memory recv list).
    `passes` = (forward heads, forward tails, backward heads, backward tails) per group; `plan`: `transfer_plan`'s,
    when the caller has it."""
    fwd_in, fwd_out, bwd_in, bwd_out = passes
    out: list[Transfer] = []
    recv: list[tuple] = []
    if plan is None:  # a tensor crosses to a device once (`tag.sim.tensor_sends`)
        plan = transfer_plan(ctx, decs, edge_flows)
    add_planned_transfers(draft, out, recv, ctx.gg, plan, (fwd_out, fwd_in, bwd_out, bwd_in), "", asynchronous)
    return out, recv


def _blocking(transfers: list[Transfer], programs, tasks: ComputeTasks, draft: Draft) -> list[Transfer]:
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
        # the other readers of a tensor sent once (at the lowest reader's exchange; counted when built)
        more = tuple(k for k in x.deliver[1:] if k not in gt.deliver)
        out.append(Transfer(x.spec, x.producer, x.consumer, gt.wait, gt.deliver + more, x.label))
    return out


def build_task_graph(ctx: SimContext, strategy, options: BuildOptions = BuildOptions(), *, rep: list[int] | None = None,
                     plan: list | None = None) -> TaskGraph:
    """The task graph of one iteration of `strategy` on ctx's (gg, cluster, cost, training) (module docstring);
    a pipelined strategy's is `tag.sim.pipeline_build.build_pipeline_task_graph`'s.

    rep: each device's representative twin (`tag.sim.fold.strategy_twins`, with `plan`, the strategy's
    `tag.sim.tensor_sends.transfer_plan`): only the representatives' tasks are made, and sync units list only
    those, while every unit keeps its devices and phases and every transfer is made: the graph
    `tag.sim.fold.fold_with(whole graph, rep)` gives, at a fraction of the work."""
    if getattr(strategy, "pipeline", None) is not None:
        return build_pipeline_task_graph(ctx, strategy, options)
    n_dev, decs = len(ctx.dtypes), strategy.decisions
    check_strategy(strategy, ctx.gg.n_groups, n_dev)
    kept = None
    if rep is not None:  # the representatives (`tag.sim.fold.strategy_twins`: unsharded strategies only)
        if any(d.shard is not None for d in decs):
            raise ValueError("build_task_graph: rep= takes an unsharded strategy")
        kept = [d for d, r in enumerate(rep) if r == d]
    draft = Draft(ComputeTasks(), [], [], [])
    pending: list = []
    fwd_id, fwd_out, bwd_id, bwd_out, extra_upd_ms, per_group = _compute_tasks(ctx, decs, draft, pending, kept)
    devs_of = [pg[0] for pg in per_group]
    transfers, recv = _transfers(ctx, decs, (fwd_id, fwd_out, bwd_id, bwd_out), draft, not options.blocking_sends,
                                 plan)
    units, extra_static = sync_units(ctx, strategy, devs_of)
    upd_id = update_tasks(ctx, units, per_group, extra_upd_ms, draft, decs, kept)
    wire_syncs(units, devs_of, bwd_id, upd_id, draft, options.overlap_sync)
    add_gathers_after_update(ctx, decs, units, upd_id, draft)
    programs = device_programs(draft.tasks.device, n_dev)
    passes = [(g, w, ids[g]) for g in range(len(decs)) for w, ids in (("fwd", fwd_id), ("bwd", bwd_id))]
    add_weight_gathers(ctx, decs, units, passes, programs, draft)
    wire_batch_stats(ctx, decs, [[m] for m in fwd_id], [[m] for m in bwd_id], units, programs, draft)
    wire_collectives(ctx, pending, units, draft)
    if options.blocking_sends:
        transfers = _blocking(transfers, programs, draft.tasks, draft)
    return TaskGraph(n_dev, draft.tasks, programs, transfers, units, draft.inputs, draft.first_sync, draft.dependents,
                     MemoryInputs(recv, extra_static), sum(decs[0].batch_rows) if decs else 0)

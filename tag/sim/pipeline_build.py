"""The builder for pipelined strategies (``Strategy.pipeline`` not None): the micro-batched task graph.

With m = ``pipeline.micro_batches`` micro-batches, S stages and row maps ``rows`` over the whole batch
(`tag.strategy.pipeline`):

Tasks. For every micro-batch j and group g, a forward task F(g, j) and a backward task B(g, j) on each device d
of the group, lasting the cost model's time at rows[d] / m rows (`SimContext.micro_group_costs`). A device of
stage s runs ``stage_order(schedule, k, S, s, m)``: for ("F", j) the forwards of the stage's groups for
micro-batch j in group order, for ("B", j) their backwards in reverse group order; then its optimizer step.

Transfers. Per micro-batch j, the messages of `tag.sim.tensor_sends.transfer_plan` on the micro row maps (the same
for every j; a tensor crosses to a device once, however many of its groups there read it), on the real routes:
activations F(src, j) -> F(readers, j), gradients B(readers, j) -> B(src, j). They are
asynchronous (a pipeline runtime's isend / irecv): ``blocking_sends`` does not apply to pipelines.

Send work. Between two CPU devices of one machine (ranks on loopback) a message is written by the sending rank's
own thread (gloo's isend copies it into the socket as it is posted), so the sender's stream is busy while its bytes
go out: after each pass of group g, a task of the pass's kind and group on every sending device, lasting sum over
its messages of bytes / route bandwidth (`send_ms`, the bandwidth `tag profile links` measures). The route's
latency is not in it (a hot ping-pong's one-way time is mostly the kernel and the receiver, not the sender's
thread). The transfer itself still starts when the pass ends. GPUs and messages between machines have no such task
(a NIC or a copy engine moves the bytes).

Gradient sync. Gradients accumulate over the micro-batches; each bucket (and shared-parameter or SFB sync) is
built as without pipelining (`tag.sim.build`, whole-batch bytes) and waits for the backward of its groups for the
last micro-batch, m - 1, on all their devices: the stage's last backward, since every schedule runs the backwards
in micro-batch order. It then overlaps with the drain of the earlier stages. The optimizer steps follow the
syncs, as without pipelining. SFB: each micro-batch's backward skips its local dW; the all-gathers and the
whole-batch dW before the step are as without pipelining.

Task ids follow one interleaving of the stages' orders in which every task comes after the tasks it needs
(round robin over the stages, each taking its next pass when the earlier stages have run that micro-batch's
forward, or the later ones its backward), so the critical-path estimate (`tag.sim.critical_path`), which walks
tasks in id order, sees producers before consumers.

Example (2 stages, 1 group each on its own device, m = 4, free links, forward 1 ms and backward 2 ms per
micro-batch): GPipe ends the last backward at (m + S - 1) x 3 = 15 ms; see tests/sim/test_pipeline_timeline.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tag.cost.comm import p2p_ms
from tag.sim.build_parts import (BuildOptions, Draft, add_planned_transfers, check_strategy, device_programs, edge_flows,
                                 sync_units, update_tasks, wire_batch_stats, wire_syncs, with_recompute)
from tag.sim.context import SimContext, micro_decision
from tag.sim.gradsync import sfb_compute_ms
from tag.sim.shard_build import add_tails, wire_collectives
from tag.sim.taskgraph import ComputeTasks, DependentKind, MemoryInputs, TaskGraph, TaskKind, Transfer
from tag.sim.tensor_sends import Send, transfer_plan
from tag.sim.zero import add_gathers_after_update, add_weight_gathers
from tag.strategy.pipeline import stage_order

_TRANSFER = DependentKind.TRANSFER


@dataclass
class PipelineTaskGraph(TaskGraph):
    """A `TaskGraph` of a pipelined iteration: also each task's micro-batch (-1: an optimizer step) and m.

    ``memory.recv`` lists the transfer pairs of one micro-batch (bytes at micro rows)."""

    micro_batch: list[int] = field(default_factory=list)
    micro_batches: int = 1


def check_pipeline(gg, strategy) -> list[int]:
    """The stage of every group; ValueError naming the group, edge or device when the pipeline does not fit the
    strategy: each group in exactly one stage, a group's devices among its stage's, no edge from a later stage
    to an earlier one, every row count a multiple of the micro-batch count."""
    pl = strategy.pipeline
    n = gg.n_groups
    stage_of = [-1] * n
    for s, st in enumerate(pl.stages):
        for g in st.groups:
            if not 0 <= g < n:
                raise ValueError(f"pipeline stage {s} names group {g}; the model has groups 0..{n - 1}")
            if stage_of[g] >= 0:
                raise ValueError(f"group {g} is in pipeline stages {stage_of[g]} and {s}")
            stage_of[g] = s
    for g, s in enumerate(stage_of):
        if s < 0:
            raise ValueError(f"group {g} is in no pipeline stage")
        outside = set(strategy.decisions[g].devices) - set(pl.stages[s].devices)
        if outside:
            raise ValueError(f"group {g} has rows on device {min(outside)}, which is not a device of its stage {s}")
        rows = strategy.decisions[g].rows
        if any(r % pl.micro_batches for r in rows):
            raise ValueError(f"group {g}: row map {rows} is not a multiple of {pl.micro_batches} micro-batches")
    for e in gg.edges:
        if stage_of[e.src] > stage_of[e.dst]:
            raise ValueError(f"edge g{e.src}->g{e.dst} goes from stage {stage_of[e.src]} back to stage "
                             f"{stage_of[e.dst]}")
    return stage_of


def pass_sequence(pipeline) -> list[tuple[int, str, int]]:
    """All stages' passes as one list of (stage, "F" | "B", micro-batch), each after what it needs: a forward
    after the same micro-batch's forward on every earlier stage, a backward after its backward on every later
    stage. Round robin over the stages, one pass per stage per round.

    >>> from tag.strategy.pipeline import Pipeline, Stage
    >>> pass_sequence(Pipeline((Stage((0,), (0,)), Stage((1,), (1,))), 2, "gpipe"))[:4]
    [(0, 'F', 0), (1, 'F', 0), (0, 'F', 1), (1, 'F', 1)]
    """
    n_st, m = len(pipeline.stages), pipeline.micro_batches
    orders = [stage_order(pipeline.schedule, pipeline.k, n_st, s, m) for s in range(n_st)]
    ptr = [0] * n_st
    n_fwd = [0] * n_st  # forwards each stage has emitted (they run in micro-batch order)
    n_bwd = [0] * n_st
    out: list[tuple[int, str, int]] = []
    remaining = sum(map(len, orders))
    while remaining:
        progressed = False
        for s in range(n_st):
            if ptr[s] == len(orders[s]):
                continue
            kind, j = orders[s][ptr[s]]
            ready = all(n_fwd[t] > j for t in range(s)) if kind == "F" else \
                all(n_bwd[t] > j for t in range(s + 1, n_st))
            if not ready:
                continue
            out.append((s, kind, j))
            ptr[s] += 1
            if kind == "F":
                n_fwd[s] += 1
            else:
                n_bwd[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:  # cannot happen for the schedules of tag.strategy.pipeline
            raise ValueError(f"pipeline schedule {pipeline.schedule!r} deadlocks")
    return out


def send_ms(ctx: SimContext, src: int, dst: int, nbytes: float) -> float:
    """The sending rank's busy time for one message of `nbytes` from device src to dst, ms: its bytes over the
    route's narrowest link (`tag.cost.comm.p2p_ms` without latency) when both are CPU devices of one machine
    (module docstring, "Send work"); else 0."""
    cl = ctx.cluster
    a, b = cl.devices[src], cl.devices[dst]
    if src == dst or a.machine != b.machine or a.type.kind != "cpu" or b.type.kind != "cpu":
        return 0.0
    links = [cl.links[k] for k in cl.routes[src][dst]]
    if not links:
        return 0.0
    return p2p_ms(nbytes, min(k.bandwidth_gbps for k in links), 0.0)


def send_work(ctx: SimContext, plan) -> tuple[list[dict[int, float]], list[dict[int, float]]]:
    """Per group g, the send work ms per device of (its forward pass: activations to its consumers, its backward
    pass: gradients back to its producers), from the micro-batch messages `plan` (`transfer_plan`; a message's
    gradient leaves with the backward of its lowest reader, the last of them to run)."""
    n = ctx.gg.n_groups
    fwd: list[dict[int, float]] = [{} for _ in range(n)]
    bwd: list[dict[int, float]] = [{} for _ in range(n)]
    for x in plan:
        if isinstance(x, Send):
            msgs = ((fwd, x.producer, [(x.src, x.dst, x.fwd)]), (bwd, x.readers[0], [(x.dst, x.src, x.bwd)]))
        else:
            e = ctx.gg.edges[x.edge]
            msgs = ((fwd, e.src, x.flows[0]), (bwd, e.dst, x.flows[1]))
        for out, g, pairs in msgs:
            for s, d, spec in pairs:
                ms = send_ms(ctx, s, d, spec.volume_bytes)
                if ms > 0.0:
                    out[g][s] = out[g].get(s, 0.0) + ms
    return fwd, bwd


def _compute_tasks(ctx: SimContext, strategy, draft: Draft, micro: list[int], pending: list, sends):
    """Forward and backward tasks of every pass in `pass_sequence` order, with a sharded group's tails after its
    passes (`tag.sim.shard_build`; its collectives appended to `pending`) and its send work after them (`sends`:
    `send_work`); ({g: [{device: task}] per micro-batch} for forward heads, forward tails, backward heads and
    backward tails, SFB dW ms per device, whole-batch per-group costs)."""
    pl, decs = strategy.pipeline, strategy.decisions
    m = pl.micro_batches
    n_grp = len(decs)
    full = [ctx.group_costs(g, decs[g]) for g in range(n_grp)]
    per_mb = [ctx.micro_group_costs(g, decs[g], m) for g in range(n_grp)]
    bwd_ms = []
    extra_upd_ms = [0.0] * len(ctx.dtypes)  # SFB dW products (`update_tasks`)
    for g in range(n_grp):
        devs, fwd, bwd, _ = per_mb[g]
        if decs[g].sfb:  # each micro-batch skips its local dW; the step forms dW over the whole batch
            saved, _ = sfb_compute_ms(ctx, g, micro_decision(decs[g], m))
            _, added = sfb_compute_ms(ctx, g, decs[g])
            bwd = [max(0.0, b - s) for b, s in zip(bwd, saved)]
            for d, a in zip(devs, added):
                extra_upd_ms[d] += a
        bwd_ms.append(with_recompute(decs[g], fwd, bwd))
    fwd_id: list[list] = [[None] * m for _ in range(n_grp)]
    bwd_id: list[list] = [[None] * m for _ in range(n_grp)]
    fwd_out: list[list] = [[None] * m for _ in range(n_grp)]
    bwd_out: list[list] = [[None] * m for _ in range(n_grp)]
    mdecs = [micro_decision(dc, m) for dc in decs]
    collectives: dict = {}  # (g, kind) -> its replicas' collectives, the same for every micro-batch
    for s, kind, j in pass_sequence(pl):
        groups = pl.stages[s].groups
        for g in (sorted(groups) if kind == "F" else sorted(groups, reverse=True)):
            devs, fwd, _, _ = per_mb[g]
            if kind == "F":
                fwd_id[g][j] = dict(zip(devs, draft.add_tasks(devs, TaskKind.FORWARD, g, fwd)))
                fwd_out[g][j] = add_tails(ctx, mdecs, g, TaskKind.FORWARD, fwd_id[g][j], draft, pending, f" mb{j}",
                                          collectives)
            else:
                bwd_id[g][j] = dict(zip(devs, draft.add_tasks(devs, TaskKind.BACKWARD, g, bwd_ms[g])))
                bwd_out[g][j] = add_tails(ctx, mdecs, g, TaskKind.BACKWARD, bwd_id[g][j], draft, pending,
                                          f" mb{j}", collectives)
            work = sends[0 if kind == "F" else 1][g]
            if work:
                draft.add_tasks(list(work), TaskKind.FORWARD if kind == "F" else TaskKind.BACKWARD, g,
                                list(work.values()))
            micro += [j] * (len(draft.tasks) - len(micro))
    return fwd_id, fwd_out, bwd_id, bwd_out, extra_upd_ms, full


def _transfers(ctx: SimContext, strategy, passes, draft: Draft, plan):
    """Per micro-batch and message of `plan` (`transfer_plan` on the micro row maps, the same for every j): the
    activation F(src, j) -> F(readers, j) and the gradient B(readers, j) -> B(src, j), at micro rows
    (`add_planned_transfers`; `passes`: forward heads, forward tails, backward heads, backward tails, per group and
    micro-batch); ([Transfer], memory recv list of one micro-batch)."""
    fwd_id, fwd_out, bwd_id, bwd_out = passes
    m = strategy.pipeline.micro_batches
    out: list[Transfer] = []
    recv: list[tuple] = []
    for j in range(m):
        maps = tuple([per_group[j] for per_group in x] for x in (fwd_out, fwd_id, bwd_out, bwd_id))
        add_planned_transfers(draft, out, recv if j == 0 else None, ctx.gg, plan, maps, f" mb{j}")
    return out, recv


def build_pipeline_task_graph(ctx: SimContext, strategy, options: BuildOptions = BuildOptions()) -> PipelineTaskGraph:
    """The task graph of one pipelined iteration of `strategy` (module docstring); ValueError when the pipeline
    does not fit the strategy (`check_pipeline`)."""
    n_dev, decs = len(ctx.dtypes), strategy.decisions
    check_strategy(strategy, ctx.gg.n_groups, n_dev)
    check_pipeline(ctx.gg, strategy)
    m = strategy.pipeline.micro_batches
    draft = Draft(ComputeTasks(), [], [], [])
    micro: list[int] = []
    pending: list = []
    mdecs = [micro_decision(dc, m) for dc in decs]
    plan = transfer_plan(ctx, mdecs, edge_flows)
    sends = send_work(ctx, plan)
    fwd_id, fwd_out, bwd_id, bwd_out, extra_upd_ms, full = _compute_tasks(ctx, strategy, draft, micro, pending, sends)
    devs_of = [pg[0] for pg in full]
    transfers, recv = _transfers(ctx, strategy, (fwd_id, fwd_out, bwd_id, bwd_out), draft, plan)
    units, extra_static = sync_units(ctx, strategy, devs_of)
    upd_id = update_tasks(ctx, units, full, extra_upd_ms, draft, decs)
    last_bwd = [bwd_id[g][m - 1] for g in range(len(decs))]  # the stage's last backward of each group
    wire_syncs(units, devs_of, last_bwd, upd_id, draft, options.overlap_sync)
    add_gathers_after_update(ctx, decs, units, upd_id, draft)
    micro += [-1] * (len(draft.tasks) - len(micro))
    programs = device_programs(draft.tasks.device, n_dev)
    add_weight_gathers(ctx, decs, units, [(g, "fwd", fwd_id[g][0]) for g in range(len(decs))], programs, draft)
    wire_batch_stats(ctx, decs, fwd_id, bwd_id, units, programs, draft)
    wire_collectives(ctx, pending, units, draft)
    return PipelineTaskGraph(n_dev, draft.tasks, programs, transfers, units, draft.inputs, draft.first_sync,
                             draft.dependents, MemoryInputs(recv, extra_static), sum(decs[0].batch_rows) if decs else 0,
                             micro_batch=micro, micro_batches=m)

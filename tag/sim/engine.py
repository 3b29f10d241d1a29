"""`simulate`: one training iteration = build the task graph, run it, account memory, assemble the result.

The model is documented in `tag.sim`; the parts are `tag.sim.build` (the builder), `tag.sim.fold` (twin folding)
and `tag.sim.fuse` (chain fusion: exact reductions of the task graph, skipped when a trace is asked for),
`tag.sim.events` (the event loop),
`tag.sim.memory` (peak memory in program order) and `tag.sim.trace` (Chrome-trace events). Only the trace reads
per-task start times.
"""

from __future__ import annotations

from tag.sim.build import BuildOptions, build_task_graph
from tag.sim.build_parts import edge_flows
from tag.sim.context import SimContext, sim_context
from tag.sim.events import Timeline, run_task_graph
from tag.sim.fold import fold_twins, strategy_twins, unfold_end_ms
from tag.sim.fuse import fuse_chains, run_fused
from tag.sim.network import INF
from tag.sim.peak_memory import strategy_peak_memory_bytes
from tag.sim.result import SimResult
from tag.sim.taskgraph import TaskGraph, TaskKind
from tag.sim.tensor_sends import transfer_plan
from tag.sim.trace import (COMPUTE_PID, NETWORK_PID, STEP_EVENT_NAMES, compute_event_name, idle_events, lane_metadata,
                           x_event)
from tag.strategy import Strategy, TrainingConfig


def simulate(gg, cluster, cost, strategy: Strategy, training: TrainingConfig, *, trace: bool = False,
             overlap_sync: bool = True, blocking_sends: bool = False) -> SimResult:
    """Simulate one training iteration of `strategy`; times in ms, memory in 1e9-byte units (`SimResult`).

    `overlap_sync=False` models the `tag deploy` runtime: a device's gradient syncs start only after its
    whole backward (no DDP-style overlap of sync with the remaining backward).
    `blocking_sends=True` models its exchanges too: every transfer is a rendezvous of its two ranks at the
    consumer group's place in the group order, and blocks both (`tag.sim.rendezvous`).
    """
    ctx = sim_context(gg, cluster, cost, training)
    options = BuildOptions(overlap_sync=overlap_sync, blocking_sends=blocking_sends)
    caps = [l.bytes_per_ms for l in cluster.links]
    if trace:  # the trace shows every task
        tg = build_task_graph(ctx, strategy, options)
        return _result(ctx, strategy, tg, run_task_graph(tg, caps, log_flows=True), trace)
    # the exact reductions (twins folded, chains fused); bit-identical times. Twins read off the strategy are
    # folded as the graph is built; the others once it is built
    tg, rep = build_folded(ctx, strategy, options)
    if rep is None:
        folded = fold_twins(tg)
        if folded is not None:
            tg, rep = folded
    timeline = run_fused(fuse_chains(tg), caps)
    if rep is not None:
        timeline.device_end_ms = unfold_end_ms(timeline.device_end_ms, rep)
    return _result(ctx, strategy, tg, timeline, trace, rep)


def build_folded(ctx: SimContext, strategy: Strategy,
                 options: BuildOptions = BuildOptions()) -> tuple[TaskGraph, list[int] | None]:
    """(task graph, rep): the graph built with the twins read off the strategy folded (`tag.sim.fold.strategy_twins`,
    rep[d] = d's representative), or the whole graph and None when it has none. Either has the whole graph's
    transfers, sync units' phases and memory inputs, so its link loads and peak memory are the whole graph's."""
    plan = None
    if getattr(strategy, "pipeline", None) is None:
        plan = transfer_plan(ctx, strategy.decisions, edge_flows)
        rep = strategy_twins(ctx, strategy, plan)
        if rep is not None:
            return build_task_graph(ctx, strategy, options, rep=rep, plan=plan), rep
    return build_task_graph(ctx, strategy, options, plan=plan), None


def busy_ms(tg: TaskGraph, rep: list[int] | None = None) -> list[float]:
    """Compute-stream busy time per device (ms): the durations of its program's tasks added in program order
    (of the unfused graph, so that it does not depend on whether a trace was asked for). rep: each device's
    representative twin (`tag.sim.fold.twin_representatives`), whose program has the same durations in the same
    order, so the same sum."""
    dur = tg.tasks.duration_ms
    if rep is None:
        return [sum(map(dur.__getitem__, prog), 0.0) for prog in tg.programs]
    own = {r: sum(map(dur.__getitem__, tg.programs[r]), 0.0) for r in set(rep)}
    return [own[r] for r in rep]


def _result(ctx: SimContext, strategy: Strategy, tg: TaskGraph, tl: Timeline, trace: bool,
            rep: list[int] | None = None) -> SimResult:
    """The SimResult of one run: times, memory and OOM, busy time (`busy_ms`), link bytes, and the trace if
    asked."""
    cluster = ctx.cluster
    ids = [d.id for d in cluster.devices]
    n_dev = tg.n_devices
    busy = busy_ms(tg, rep)
    fit_ms = max(tl.device_end_ms) if tl.device_end_ms else 0.0
    peak = strategy_peak_memory_bytes(ctx, strategy, tg.memory)
    oom_devices = [ids[d] for d in range(n_dev) if peak[d] > ctx.dtypes[d].usable_memory_bytes]
    oom = bool(oom_devices)
    batch = tg.batch_size
    it_ms = INF if oom else fit_ms
    sps = 0.0 if oom or fit_ms <= 0 else batch / (fit_ms / 1e3)
    events = _trace_events(ctx, strategy, tg, tl) if trace else []
    return SimResult(it_ms, sps, oom, oom_devices, _peak_gb(ids, peak), dict(zip(ids, busy)),
                     _link_bytes(cluster, tl.link_bytes), events, fit_ms, batch, getattr(ctx.cost, "name", ""))


def peak_memory_gb(ctx: SimContext, strategy: Strategy, tg: TaskGraph) -> dict[str, float]:
    """Peak memory per device id (1e9-byte units) of `strategy` from its built task graph `tg`: the
    `SimResult.peak_memory_gb` a simulation reports, without running the event loop (peaks depend on the graph's
    memory terms, not on its timeline)."""
    return _peak_gb([d.id for d in ctx.cluster.devices], strategy_peak_memory_bytes(ctx, strategy, tg.memory))


def _peak_gb(ids: list[str], peak_bytes) -> dict[str, float]:
    return dict(zip(ids, (peak_bytes / 1e9).tolist()))


def _link_bytes(cluster, per_link: list[float]) -> dict[str, float]:
    """Bytes per "src->dst" link direction (links with none left out)."""
    lb: dict[str, float] = {}
    for l, b in enumerate(per_link):
        if b > 0:
            key = f"{cluster.links[l].src}->{cluster.links[l].dst}"
            lb[key] = lb.get(key, 0.0) + b
    return lb


def _trace_events(ctx: SimContext, strategy: Strategy, tg: TaskGraph, tl: Timeline) -> list[dict]:
    """Chrome-trace events: one per compute task on its device's lane, one per flow on each link it crosses."""
    cluster, gg = ctx.cluster, ctx.gg
    tasks, op_names, groups = tg.tasks, gg.graph.ops, gg.groups
    events: list[dict] = []
    micro = getattr(tg, "micro_batch", None)  # a pipelined graph's micro-batch per task (`tag.sim.pipeline_build`)
    for k in range(len(tasks)):
        g, d, ms, kind = tasks.group[k], tasks.device[k], tasks.duration_ms[k], tasks.kind[k]
        if kind is TaskKind.UPDATE or kind is TaskKind.WAIT:
            events.append(x_event(STEP_EVENT_NAMES[kind.value], kind.value, tl.start_ms[k], ms, COMPUTE_PID, d))
            continue
        oids = groups[g].op_ids
        ops = f"{op_names[oids[0]].name}" + (f" .. {op_names[oids[-1]].name}" if len(oids) > 1 else "") if oids else ""
        dec = strategy.decisions[g]
        extra = {"recompute": True} if dec.recompute and kind is TaskKind.BACKWARD else {}
        if micro is None:
            events.append(x_event(f"{kind.value} g{g} {ops}".strip(), kind.value, tl.start_ms[k], ms,
                                  COMPUTE_PID, d, {"group": g, "rows": dec.rows[d], **extra}))
        else:
            mb_rows = dec.rows[d] // tg.micro_batches
            events.append(x_event(compute_event_name(kind.value, g, ops, micro[k]), kind.value, tl.start_ms[k], ms,
                                  COMPUTE_PID, d, {"group": g, "rows": mb_rows, "micro_batch": micro[k], **extra}))
    used_links = {}
    for label, s, e, links in tl.flows:
        for l in links:
            used_links[l] = f"{cluster.links[l].src}->{cluster.links[l].dst}"
            events.append(x_event(label, "comm", s, e - s, NETWORK_PID, l))
    names = dict(enumerate(d.id for d in cluster.devices))
    if micro is not None:  # the pipeline's bubbles
        events += idle_events(tg.programs, tl.start_ms, tasks.duration_ms, names)
    return lane_metadata(names, used_links) + events

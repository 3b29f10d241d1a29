"""ZeRO in the task graph (`Decision.zero`, docs/plan.md § memory and precision): which collectives each stage
adds, when they may start, and what they release. Both builders (`tag.sim.build`, `tag.sim.pipeline_build`) call
these; the formulas of the collectives are `tag.sim.collectives` (``reducescatter``, ``allgather`` and their
hierarchical halves, `zero_collective`).

A group's **sharded bytes** are its own sync bytes (`tag.sim.buckets.own_sync_bytes`: its parameters less those
shared with other groups and those its SFB ops send as factors) when ``zero > 0``; n is the number of its
replicas (the devices with rows). A bucket holds groups of one ZeRO stage (`tag.sim.buckets.derive_buckets`).

* **zero 1 and 2**: the bucket's all-reduce becomes a reduce-scatter of its bytes S (ring: (n-1)/n x S per hop,
  n-1 steps), released as before to the optimizer steps; a replica updates only its 1/n of the sharded bytes
  (`update_fractions`: the group's update time x (1 - f + f/n), f = sharded / parameter bytes); after the
  steps of all the bucket's replicas, an all-gather of the updated weights (S, the other half of the ring) that
  ends the iteration on each replica (a zero-length "wait" task on its stream, `TaskKind.WAIT`). Stages 1 and 2
  move and wait alike (they differ in memory only). DeepSpeed runs these all-gathers after ``optimizer.step()``,
  as here.
* **zero 3** (FSDP, the group is the unit): the reduce-scatter as above and no all-gather after the step; instead
  the group's sharded weights are all-gathered before each of its forward and backward tasks (whole-batch
  builder: 2 gathers per step, so 1.5 x the all-reduce's wire volume). A gather is **prefetched** as FSDP2 does:
  it is issued when the task before the gathering task starts on each replica (it waits for the end of the task
  two places earlier in that replica's program; none, for the first two tasks: it is ready at time 0), and
  queues on the group's communicator behind the collectives issued before it. **On CPU ranks** (not every device
  a GPU) deploy gathers on the main thread right before the gathering task, blocking (`tag.deploy.zero`): the
  gather waits for the end of the task just before it, and that task's device waits for the gather.
* **pipelined** (gradient accumulation over m micro-batches): as FSDP2 under torch's pipeline schedules
  (torchtitan: ``reshard_after_forward=False`` with pipelining, gradient sync only after the last micro-batch),
  a zero-3 group's weights are gathered once per step, before its forward of micro-batch 0, and stay whole
  until after its last backward; its gradients accumulate unsharded and are reduce-scattered once, after the
  stage's last backward (as every bucket). DeepSpeed's ZeRO-1 with its pipeline engine also reduces once per
  step. So a pipelined stage-3 group moves one all-reduce's volume per step, not 1.5.

* **fresh buffers** (`zero_fill_ms`, whole-batch builder): ZeRO's runtime allocates buffers every step, and on CPU
  ranks a large fresh buffer costs its pages' faults as it is first written (several times zeroing a kept one).
  With the cost model's ``fresh_fill_ms`` (a CPU profile's step block), per replica of a group of
  sharded bytes S over n replicas: stage 1 adds fill(S / n) to the optimizer step (the fresh master gradient
  the reduce-scatter writes); stage 2 adds fill(S) to the backward (the full gradient zeroed before it); stage 3
  adds fill(S) to the forward (the gathered weights) and 2 fill(S) to the backward (gathered again, and autograd's
  fresh gradient of them). A sharded group (`Decision.shard`) and the pipelined builder add none.

Example (ring, n = 2, one group of S bytes, zero 3, whole batch): gather S/2 per hop before the forward, again
before the backward, reduce-scatter S/2 after it: 3 x S/2 per hop in all, against one all-reduce's 2 x S/2.
"""

from __future__ import annotations

from tag.sim.buckets import own_sync_bytes
from tag.sim.collectives import uses_nccl, zero_collective
from tag.sim.taskgraph import DependentKind, SyncUnit, TaskKind

_SYNC = DependentKind.SYNC
_REDUCE_SCATTERS = {zero_collective("reducescatter", a): zero_collective("allgather", a) for a in ("ring", "hierarchical")}


def uses_zero(decisions) -> bool:
    """Whether any decision has a ZeRO stage above 0."""
    return any(getattr(d, "zero", 0) for d in decisions)


def zero_shard_bytes(gg, decisions) -> list[float]:
    """Per group, the bytes ZeRO shards over its replicas (its own sync bytes when ``zero > 0``, else 0): what a
    zero-3 gather moves and what a zero 1-3 reduce-scatter sums, per group."""
    own = own_sync_bytes(gg, decisions)
    return [b if getattr(d, "zero", 0) else 0.0 for b, d in zip(own, decisions)]


def update_fractions(gg, decisions) -> list[float]:
    """Per group, the fraction of its update time one replica spends: 1 - f + f/n with f its sharded bytes over
    its parameter bytes and n its replicas (1 without ZeRO).

    >>> from types import SimpleNamespace as NS
    >>> from tag.strategy import Decision
    >>> gg = NS(groups=[NS(param_bytes=400.0)], graph=None, shared_params={})
    >>> update_fractions(gg, [Decision((2, 2, 0, 2), zero=1)])
    [0.3333333333333333]
    """
    shard = zero_shard_bytes(gg, decisions)
    out = []
    for g, d in enumerate(decisions):
        p = gg.groups[g].param_bytes
        if shard[g] <= 0 or p <= 0:
            out.append(1.0)
            continue
        if getattr(d, "shard", None) is not None:  # a position's share of the sharded bytes over the R replicas
            from tag.sim.shards import shard_facts

            held = sum(shard_facts(gg, g, d.shard.split, d.shard.ratios).param_bytes)
            f = min(1.0, shard[g] / held) if held > 0 else 0.0
            out.append(1.0 - f + f / len(d.shard.replicas))
            continue
        f = shard[g] / p
        out.append(1.0 - f + f / len(d.devices))
    return out


def zero_fill_ms(ctx, decisions, per_group) -> list | None:
    """Per group, (forward, backward, update) ms to add on each of its devices (in `per_group[g]`'s device order)
    for ZeRO's fresh buffers (module docstring), or None when the cost model has no ``fresh_fill_ms`` or no group
    uses ZeRO. `per_group`: `SimContext.group_costs` of every group."""
    fill = getattr(ctx.cost, "fresh_fill_ms", None)
    if fill is None or not uses_zero(decisions):
        return None
    shard = zero_shard_bytes(ctx.gg, decisions)
    out = []
    for g, d in enumerate(decisions):
        devs = per_group[g][0]
        z, s = getattr(d, "zero", 0), shard[g]
        if not z or s <= 0 or d.shard is not None:
            out.append(None)
            continue
        n = max(len(devs), 1)
        f = [fill(ctx.dtypes[k], s / n if z == 1 else s) for k in devs]
        zeros = [0.0] * len(devs)
        out.append((zeros, zeros, f) if z == 1 else (zeros, f, zeros) if z == 2 else (f, [2 * x for x in f], zeros))
    return out


def bucket_method(algorithm: str, zero: int) -> str:
    """The collective a bucket of `algorithm` runs at ZeRO stage `zero`: the algorithm itself at 0, else the
    reduce-scatter (`tag.sim.collectives.zero_collective`)."""
    return zero_collective("reducescatter", algorithm) if zero else algorithm


def count_towards(draft, k: int, j: int) -> None:
    """Make task k's end count towards sync unit j (its first sync, or a further dependent)."""
    if draft.first_sync[k] < 0:
        draft.first_sync[k] = j
    else:
        draft.depend(k, (_SYNC, j))


def _zero_units(units: list[SyncUnit], decisions, stage: set[int]):
    """The reduce-scatter units whose groups are at a ZeRO stage in `stage`."""
    return [u for u in units if u.method in _REDUCE_SCATTERS and decisions[u.groups[0]].zero in stage]


def add_gathers_after_update(ctx, decisions, units: list[SyncUnit], upd_id: list[int], draft) -> None:
    """Zero 1 and 2 (module docstring): for each such reduce-scatter unit, an all-gather of its bytes over its
    devices after their optimizer steps, appended to `units`, releasing one zero-length WAIT task per device
    (created here, after the steps, so last in its program)."""
    found = _zero_units(units, decisions, {1, 2})
    if not found:
        return
    wait_id: dict[int, int] = {}
    for d in sorted({d for u in found for d in u.devices}):
        if upd_id[d] >= 0:  # -1: a device whose tasks were not made (`tag.sim.build.build_task_graph`'s rep)
            wait_id[d] = draft.add_tasks([d], TaskKind.WAIT, -1, [0.0])[0]
    for u in found:
        j = len(units)
        gs = u.groups
        label = u.label.replace("reduce-scatter", "gather w", 1)  # "gather w g3..g5", a shard's "gather w g3 p1"
        g = SyncUnit(gs, u.devices, u.nbytes, _REDUCE_SCATTERS[u.method], None, label + " updated")
        g.phases = ctx.phases(g.method, g.devices, g.nbytes, None)
        for d in u.devices:
            if d not in wait_id:
                continue
            g.wait.append(upd_id[d])
            count_towards(draft, upd_id[d], j)
            g.release.append(wait_id[d])
            draft.inputs[wait_id[d]] += 1
        units.append(g)


def add_weight_gathers(ctx, decisions, units: list[SyncUnit], passes, programs, draft) -> None:
    """Zero 3 (module docstring): for every (group, label, {device: task}) in `passes` of a group in a zero-3
    reduce-scatter unit, an all-gather of the group's sharded bytes over its devices, appended to `units`,
    prefetched (it waits for the task two places before the gathering task in each device's program) and
    releasing the gathering tasks."""
    found = _zero_units(units, decisions, {3})
    if not found:
        return
    method_of = {g: _REDUCE_SCATTERS[u.method] for u in found for g in u.groups}
    shard = zero_shard_bytes(ctx.gg, decisions)
    pos = {k: i for prog in programs for i, k in enumerate(prog)}
    tdev = draft.tasks.device
    for g, what, tasks in passes:
        if g not in method_of:
            continue
        for devs, nbytes, label in _gather_sets(ctx, decisions[g], g, shard[g]):
            _add_weight_gather(ctx, units, draft, programs, pos, tdev, tasks, g, devs, nbytes,
                               method_of[g], f"gather w g{g} {what}{label}")


def _gather_sets(ctx, decision, g: int, nbytes: float) -> list:
    """The device sets of a zero-3 weight gather of group g: all its devices with its sharded bytes, or for a
    sharded group each position's peers with that position's bytes (`tag.sim.buckets.position_bytes`)."""
    if decision.shard is None:
        return [(decision.devices, nbytes, "")]
    from tag.sim.buckets import position_bytes

    per = position_bytes(ctx.gg, g, decision)
    return [(tuple(sorted(decision.shard.peers(d))), per[j], f" p{j}")
            for j, d in enumerate(decision.shard.replicas[0])]


def _add_weight_gather(ctx, units, draft, programs, pos, tdev, tasks, g, devs, nbytes, method, label) -> None:
    """One zero-3 gather over `devs` (prefetched, or blocking on CPU ranks) releasing their tasks in `tasks`
    (`add_weight_gathers`)."""
    j = len(units)
    u = SyncUnit((g,), devs, nbytes, method, None, label)
    u.phases = ctx.phases(u.method, devs, u.nbytes, None)
    lag = 2 if uses_nccl(ctx.cluster, devs) else 1  # prefetched (FSDP2), or blocking on CPU ranks (docstring)
    for d in devs:
        k = tasks.get(d)
        if k is None:  # a device whose tasks were not made
            continue
        i = pos[k]
        if i >= lag:
            before = programs[tdev[k]][i - lag]
            u.wait.append(before)
            count_towards(draft, before, j)
        u.release.append(k)
        draft.inputs[k] += 1
    units.append(u)

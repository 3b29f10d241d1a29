"""Sharded groups in the task graph (`tag.sim.shards` says what they compute and move): the collectives of each
replica after a pass, as sync units between the pass and a zero-length tail task.

For a pass (forward or backward, one micro-batch under a pipeline) of a sharded group with collectives
(`tag.sim.shards.replica_collectives`), each device of the replica runs the pass (the head task), then a
zero-length task of the same kind and group (the tail). One sync unit per replica waits for the heads of its k
devices, runs the collectives one after another on the replica's communicator (a ring all-reduce, then a padded
ring all-gather) and releases the tails. What leaves the pass (activations forward, gradients backward) leaves
from the tail; what enters it arrives at the head. Passes without collectives have no tail (tail = head).
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.sim.shards import replica_collectives
from tag.sim.taskgraph import SyncUnit, TaskKind
from tag.sim.zero import count_towards


@dataclass(frozen=True)
class CollectiveUnit:
    """What every sync unit of one replica's collectives after one pass shares, whatever the micro-batch: the
    replica in topology order, its bytes, first method, label suffix and phases (`SimContext.phases` of each step,
    one after another)."""

    devices: tuple[int, ...]  # sorted
    nbytes: float
    method: str
    suffix: str
    phases: tuple


@dataclass
class PendingCollective:
    """One replica's collectives after one pass, waiting to be wired (`wire_collectives`)."""

    group: int
    label: str
    devices: tuple[int, ...]  # the replica, position order
    unit: CollectiveUnit
    heads: dict
    tails: dict


def _collective_units(ctx, g: int, decisions, kind: TaskKind) -> list[tuple[tuple[int, ...], CollectiveUnit]]:
    """[(replica devices in position order, its `CollectiveUnit`)] of group g's pass `kind` (`replica_collectives`;
    [] when it has none)."""
    out = []
    for rc in replica_collectives(ctx, g, decisions, "fwd" if kind is TaskKind.FORWARD else "bwd"):
        devs = tuple(sorted(rc.devices))
        phases = [p for method, nbytes in rc.steps for p in ctx.phases(method, devs, nbytes, None)]
        out.append((rc.devices, CollectiveUnit(devs, float(sum(b for _, b in rc.steps)), rc.steps[0][0],
                                               " " + "+".join(m.replace("ring", "allreduce") for m, _ in rc.steps),
                                               tuple(phases))))
    return out


def add_tails(ctx, decisions, g: int, kind: TaskKind, heads: dict, draft, pending: list, label: str = "",
              memo: dict | None = None) -> dict:
    """The tails of pass `kind` of group g ({device: task}; the heads where it has no collectives), created now so
    each follows its head in program order; the replicas' collectives are appended to `pending`. `memo`: a dict
    kept across the calls of one build with the same `decisions` (a pipeline's micro-batches), where each (g, kind)'s
    collectives are found once."""
    if decisions[g].shard is None:
        return heads
    key = (g, kind)
    found = None if memo is None else memo.get(key)
    if found is None:
        found = _collective_units(ctx, g, decisions, kind)
        if memo is not None:
            memo[key] = found
    if not found:
        return heads
    tails = dict(heads)
    devs = [d for rep, _ in found for d in rep]
    tails.update(zip(devs, draft.add_tasks(devs, kind, g, [0.0] * len(devs))))
    name = f"shard {kind.value} g{g}{label}"
    for rep, unit in found:
        pending.append(PendingCollective(g, name, rep, unit, heads, tails))
    return tails


def wire_collectives(ctx, pending: list[PendingCollective], units: list[SyncUnit], draft) -> None:
    """Append one sync unit per pending replica collective: it waits for the replica's heads and releases its
    tails; its phases are its steps' (`SimContext.phases`, ring order = topology order) one after another."""
    inputs = draft.inputs
    for pc in pending:
        cu = pc.unit
        j = len(units)
        u = SyncUnit((pc.group,), cu.devices, cu.nbytes, cu.method, None, pc.label + cu.suffix)
        u.phases += cu.phases
        heads, tails = pc.heads, pc.tails
        for d in pc.devices:
            k = heads[d]
            u.wait.append(k)
            count_towards(draft, k, j)
            t = tails[d]
            u.release.append(t)
            inputs[t] += 1
        units.append(u)

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


@dataclass
class PendingCollective:
    """One replica's collectives after one pass, waiting to be wired (`wire_collectives`)."""

    group: int
    label: str
    devices: tuple[int, ...]  # the replica, position order
    steps: list  # [(method, bytes)]
    heads: dict
    tails: dict


def add_tails(ctx, decisions, g: int, kind: TaskKind, heads: dict, draft, pending: list, label: str = "") -> dict:
    """The tails of pass `kind` of group g ({device: task}; the heads where it has no collectives), created now so
    each follows its head in program order; the replicas' collectives are appended to `pending`."""
    if decisions[g].shard is None:
        return heads
    found = replica_collectives(ctx, g, decisions, "fwd" if kind is TaskKind.FORWARD else "bwd")
    if not found:
        return heads
    tails = dict(heads)
    devs = [d for rc in found for d in rc.devices]
    tails.update(zip(devs, draft.add_tasks(devs, kind, g, [0.0] * len(devs))))
    for rc in found:
        name = f"shard {kind.value} g{g}{label}"
        pending.append(PendingCollective(g, name, rc.devices, rc.steps, heads, tails))
    return tails


def wire_collectives(ctx, pending: list[PendingCollective], units: list[SyncUnit], draft) -> None:
    """Append one sync unit per pending replica collective: it waits for the replica's heads and releases its
    tails; its phases are its steps' (`SimContext.phases`, ring order = topology order) one after another."""
    for pc in pending:
        devs = tuple(sorted(pc.devices))
        j = len(units)
        u = SyncUnit((pc.group,), devs, float(sum(b for _, b in pc.steps)), pc.steps[0][0], None,
                     pc.label + " " + "+".join(m.replace("ring", "allreduce") for m, _ in pc.steps))
        for method, nbytes in pc.steps:
            u.phases += ctx.phases(method, devs, nbytes, None)
        for d in pc.devices:
            k = pc.heads[d]
            u.wait.append(k)
            count_towards(draft, k, j)
            u.release.append(pc.tails[d])
            draft.inputs[pc.tails[d]] += 1
        units.append(u)

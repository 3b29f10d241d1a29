"""Which parameters a deployed step shards by ZeRO, over which ranks, and when each unit's gradients are summed.

Pure functions over plain data (no torch); every rank computes the same units from the same plan.

The ZeRO unit is one op group (as an FSDP unit): the parameters of group g that no other group uses and that no SFB
op sends as sufficient factors, flattened in the group's parameter order into one vector of N elements, padded to
n * ceil(N / n) and cut into n equal shards over the group's ranks with rows (the replicas, in rank order). Rank
index i owns elements [i s, (i + 1) s), s = ceil(N / n). A decision's ``zero`` above 0 on a group whose replicas
all map onto one rank, or whose parameters are all shared, makes no unit (nothing to shard).

A tensor-sharded group (`tag.deploy.shard_plan.ShardGroup`, R replicas x k positions) makes one unit per position
j, over that position's R peers (`ShardGroup.peers`), as the simulator shards it (`tag.sim.zero`: ZeRO over the R
replicas per position): its parameters as position j holds them (slices at its share, the other parameters whole),
less a row half's Gemm bias at positions above 0 (position 0 alone holds it) and the unsliced parameters a split op
reads (their gradients are partial sums over the whole grid, `shard_plan.shard_syncs`: they stay whole, summed by
their bucket). With one replica nothing is sharded.

Stage 1 units keep their gradients in the plan's buckets (all-reduced as before; each rank then takes its shard of
the sum); stage 2 and 3 units leave their buckets, as SFB weights do, and are reduce-scattered, one collective per
unit, started right after the group's backward (`sync_order`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ZeroUnit:
    """Group `group`'s own parameters `params`, sharded over `ranks` (ascending) at ZeRO `stage` 1-3."""

    group: int
    stage: int
    ranks: tuple[int, ...]
    params: tuple[str, ...]


def shard_elements(total: int, n: int) -> int:
    """Elements per shard of an N-element unit over n ranks: ceil(N / n) (the last shard padded).

    >>> shard_elements(10, 4), shard_elements(8, 4), shard_elements(1, 2)
    (3, 2, 1)
    """
    return max(1, -(-total // n))


def zero_units(group_params: list[list[str]], decisions, rank_rows: list[tuple[int, ...]],
               skip: set[str], shards: dict | None = None) -> list[ZeroUnit]:
    """The ZeRO units of a plan, in group order, a sharded group's by position (module docstring).

    group_params: per group, the parameter names it uses; decisions: per group, with ``zero``; rank_rows: per group,
    rows per rank; skip: parameters that do not sync by a sum (SFB weights); shards: group -> `ShardGroup`.

    >>> from types import SimpleNamespace as NS
    >>> sg = NS(k=2, peers=lambda j: ((0, 2), (1, 3))[j], partial=frozenset({"s"}), once=frozenset({"b"}))
    >>> [(u.ranks, u.params) for u in zero_units([["w", "b", "s"]], [NS(zero=1)], [(6, 6, 6, 6)], set(), {0: sg})]
    [((0, 2), ('w', 'b')), ((1, 3), ('w',))]
    """
    shards = shards or {}
    users: dict[str, int] = {}
    for params in group_params:
        for p in set(params):
            users[p] = users.get(p, 0) + 1
    out = []
    for g, params in enumerate(group_params):
        stage = int(getattr(decisions[g], "zero", 0))
        own = tuple(p for p in params if users[p] == 1 and p not in skip)
        sg = shards.get(g)
        if sg is None:
            sets = [(tuple(r for r, n in enumerate(rank_rows[g]) if n > 0), own)]
        else:
            sets = [(sg.peers(j), tuple(p for p in own if p not in sg.partial and (j == 0 or p not in sg.once)))
                    for j in range(sg.k)]
        out += [ZeroUnit(g, stage, ranks, ps) for ranks, ps in sets if stage > 0 and len(ranks) > 1 and ps]
    return out


def sync_order(bucket_ready_after: list[int], unit_groups: list[int]) -> list[tuple[str, int]]:
    """One order of every gradient collective of a step: ("bucket", i) and ("unit", j) items.

    bucket_ready_after[i]: the group after whose backward bucket i is complete (buckets in plan order);
    unit_groups[j]: the group of reduce-scattered unit j. A unit goes right before the first bucket that is complete
    only after its group's backward (ready_after below its group), so ranks start items in this list's order as
    soon as each is complete, and every rank's collectives are a subsequence of one order.

    >>> sync_order([3, 2, 0], [2, 1])
    [('bucket', 0), ('bucket', 1), ('unit', 0), ('unit', 1), ('bucket', 2)]
    """
    out: list[tuple[str, int]] = []
    units = sorted(range(len(unit_groups)), key=lambda j: (-unit_groups[j], j))
    k = 0
    for i, ready in enumerate(bucket_ready_after):
        while k < len(units) and unit_groups[units[k]] > ready:
            out.append(("unit", units[k]))
            k += 1
        out.append(("bucket", i))
    out += [("unit", j) for j in units[k:]]
    return out

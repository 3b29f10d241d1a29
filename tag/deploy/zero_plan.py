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

Every unit leaves its buckets' sums, as SFB weights do, and is reduce-scattered: one call per plan bucket for all
its units (`scatter_batches`), started once the backward of the bucket's lowest group has run (`sync_order`), which
is the one reduce-scatter per bucket the simulator charges (`tag.sim.zero`). A unit whose group is in no plan bucket
is a call of its own. (Stage 1 keeps its full gradient buffer from step to step, stage 2 makes it per step,
`tag.deploy.zero`.)
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
    bucket: int = -1  # the plan bucket holding the group (-1: none)


def shard_elements(total: int, n: int) -> int:
    """Elements per shard of an N-element unit over n ranks: ceil(N / n) (the last shard padded).

    >>> shard_elements(10, 4), shard_elements(8, 4), shard_elements(1, 2)
    (3, 2, 1)
    """
    return max(1, -(-total // n))


def zero_units(group_params: list[list[str]], decisions, rank_rows: list[tuple[int, ...]],
               skip: set[str], shards: dict | None = None, buckets=()) -> list[ZeroUnit]:
    """The ZeRO units of a plan, in group order, a sharded group's by position (module docstring).

    group_params: per group, the parameter names it uses; decisions: per group, with ``zero``; rank_rows: per group,
    rows per rank; skip: parameters that do not sync by a sum (SFB weights); shards: group -> `ShardGroup`;
    buckets: the plan's buckets (`tag.strategy.Bucket`, anything with ``groups``), which set `ZeroUnit.bucket`.

    >>> from types import SimpleNamespace as NS
    >>> sg = NS(k=2, peers=lambda j: ((0, 2), (1, 3))[j], partial=frozenset({"s"}), once=frozenset({"b"}))
    >>> [(u.ranks, u.params) for u in zero_units([["w", "b", "s"]], [NS(zero=1)], [(6, 6, 6, 6)], set(), {0: sg})]
    [((0, 2), ('w', 'b')), ((1, 3), ('w',))]
    """
    shards = shards or {}
    bucket_of = {g: i for i, b in enumerate(buckets) for g in b.groups}
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
        out += [ZeroUnit(g, stage, ranks, ps, bucket_of.get(g, -1)) for ranks, ps in sets
                if stage > 0 and len(ranks) > 1 and ps]
    return out


def scatter_batches(units: list[ZeroUnit]) -> list[tuple[int, ...]]:
    """The reduce-scatter calls of a step (module docstring): indices of the stage 1-3 `units`, one tuple per plan
    bucket (a unit of no bucket alone), each in unit order, the tuples in unit order of their first unit.

    >>> u = lambda g, b, stage=2: ZeroUnit(g, stage, (0, 1), ("w",), b)
    >>> scatter_batches([u(0, 1), u(1, 1, 1), u(2, 0), u(3, 0), u(4, -1), u(5, -1)])
    [(0, 1), (2, 3), (4,), (5,)]
    """
    batches: dict[object, list[int]] = {}
    for j, unit in enumerate(units):
        if unit.stage >= 1:
            batches.setdefault(unit.bucket if unit.bucket >= 0 else ("alone", j), []).append(j)
    return [tuple(js) for js in batches.values()]


def sync_order(bucket_ready_after: list[int], unit_groups: list[int]) -> list[tuple[str, int]]:
    """One order of every gradient collective of a step: ("bucket", i) and ("unit", j) items.

    bucket_ready_after[i]: the group after whose backward bucket i is complete (buckets in plan order);
    unit_groups[j]: the group after whose backward reduce-scatter call j is complete (`scatter_batches`: its
    lowest group). A call goes right before the first bucket that is complete only after that group's backward
    (ready_after below it), so ranks start items in this list's order as soon as each is complete, and every
    rank's collectives are a subsequence of one order.

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

"""Which gradients each collective of a deployed step sums: the plan's gradient buckets on ranks.

A plan's buckets (`tag.strategy.Bucket`: groups in reverse backward order, an algorithm, a ps server device) come
from `Strategy.buckets` when the plan lists them (every version-2 plan file does), else from
`tag.sim.buckets.derive_buckets` over the decisions and `Strategy.bucket_mb`, the simulator's one rule for which
groups fuse. Deploy has no cost model, so a decision whose sync is ``auto`` without explicit buckets is an input
error.

On ranks, a bucket is one `SyncBucket`: the parameters of its groups that no other group uses and that no SFB op
sends as sufficient factors, summed over the ranks of its groups' devices (plus the ps server's rank) by the
bucket's algorithm, in the plan's bucket order. Parameters used by several groups (tied weights) keep a sync of
their own over the union of their users' ranks, by the sync of the first using group that names one (``auto`` reads
as ring there: a plan does not record how its shared parameters sync). A group with parameters to sync that no bucket
holds (the simulator counts no bytes for it, e.g. a hand-built graph without parameter sizes) syncs as a bucket of
its own, by its decision's sync.
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.errors import InputError
from tag.strategy import AUTO, Bucket, Strategy


@dataclass(frozen=True)
class SyncBucket:
    """Parameters whose gradients are summed over `ranks` by one algorithm (`server` is a rank for ps).

    groups: the plan bucket's groups (reverse backward order), or () for a shared parameters' sync."""

    method: str  # one of tag.strategy.SYNC_METHODS
    ranks: tuple[int, ...]
    server: int | None
    params: tuple[str, ...]
    groups: tuple[int, ...] = ()


def plan_buckets(graph, groups: list[list[int]], strategy: Strategy, plan_file: str) -> tuple[Bucket, ...]:
    """The plan's buckets: explicit ones as given, else derived (module docstring); InputError for ``auto``."""
    if strategy.buckets is not None:
        return tuple(strategy.buckets)
    from tag.graph.coarsen import build_group_graph
    from tag.sim.buckets import derive_buckets, own_sync_bytes

    gg = build_group_graph(graph, list(range(len(graph.ops))), groups)
    own = own_sync_bytes(gg, strategy.decisions)
    for g, dec in enumerate(strategy.decisions):
        if dec.sync == AUTO and own[g] > 0:
            raise InputError(plan_file, f"decisions[{g}].sync",
                             "an algorithm (ring, tree, hierarchical, leader, ps), or the plan's buckets: deploy has "
                             "no cost model to choose for auto (plan files written by tag plan list their buckets)",
                             repr(AUTO))

    def no_choice(devices, nbytes):  # unreachable: auto groups with bytes were rejected above
        raise AssertionError("auto bucket")

    return derive_buckets(gg, strategy.decisions, strategy.bucket_mb, no_choice)


def sync_buckets(group_params: list[list[str]], strategy: Strategy, buckets: tuple[Bucket, ...],
                 rank_rows: list[tuple[int, ...]], dev_rank: list[int], skip: set[str],
                 plan_file: str) -> list[SyncBucket]:
    """The rank-level syncs of `buckets` (in their order), then the groups no bucket holds, then shared parameters.

    group_params: per group, the parameter names it uses; rank_rows: per group, rows per rank; dev_rank: the rank of
    each plan device; skip: parameters that do not sync by a sum (SFB weights). Syncs over fewer than two ranks are
    left out (several devices of a group may share one rank)."""
    users: dict[str, list[int]] = {}
    for g, params in enumerate(group_params):
        for p in params:
            lst = users.setdefault(p, [])
            if g not in lst:
                lst.append(g)
    shared = {p for p, gs in users.items() if len(gs) > 1}

    def ranks_of(gs) -> set[int]:
        return {r for g in gs for r, n in enumerate(rank_rows[g]) if n > 0}

    def own(g: int) -> list[str]:
        return [p for p in group_params[g] if p not in shared and p not in skip]

    def make(method: str, ranks: set[int], server_dev: int | None, params: list[str], gs) -> SyncBucket | None:
        server = None
        if method == "ps":
            server = dev_rank[server_dev] if server_dev is not None else min(ranks)
            ranks = ranks | {server}
        if len(ranks) < 2 or not params:
            return None
        return SyncBucket(method, tuple(sorted(ranks)), server, tuple(params), tuple(gs))

    out: list[SyncBucket] = []
    placed: set[int] = set()
    for i, b in enumerate(buckets):
        if b.algorithm == AUTO:
            raise InputError(plan_file, f"buckets[{i}].algorithm", "an algorithm chosen by tag plan", repr(AUTO))
        ranks = ranks_of(b.groups[:1])
        if any(ranks_of((g,)) != ranks for g in b.groups):
            raise InputError(plan_file, f"buckets[{i}].groups", "groups that run on one replica set",
                             repr(list(b.groups)))
        placed.update(b.groups)
        sb = make(b.algorithm, ranks, b.server, [p for g in b.groups for p in own(g)], b.groups)
        if sb is not None:
            out.append(sb)
    for g in range(len(group_params) - 1, -1, -1):
        dec = strategy.decisions[g]
        if g in placed or not own(g) or len(ranks_of((g,))) < 2:
            continue
        if dec.sync == AUTO:
            raise InputError(plan_file, "buckets", f"a bucket holding group {g} (its sync is auto)", "none")
        sb = make(dec.sync or "ring", ranks_of((g,)), dec.server, own(g), (g,))
        if sb is not None:
            out.append(sb)
    by_set: dict[tuple, list[str]] = {}
    for p in sorted((p for p in shared if p not in skip), key=lambda p: (users[p][0], p)):
        dec = _sync_decision(strategy, users[p])
        method = "ring" if dec.sync in (None, AUTO) else dec.sync
        server = dec.server if method == "ps" else None
        by_set.setdefault((method, tuple(sorted(ranks_of(users[p]))), server), []).append(p)
    for (method, ranks, server), params in by_set.items():
        sb = make(method, set(ranks), server, params, ())
        if sb is not None:
            out.append(sb)
    return out


def _sync_decision(strategy: Strategy, using: list[int]):
    """The decision that says how a shared parameter syncs: the first group using it that names a sync method."""
    for g in using:
        if strategy.decisions[g].sync:
            return strategy.decisions[g]
    return strategy.decisions[using[0]]

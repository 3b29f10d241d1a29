"""Placements: which device holds which global rows of a tensor, when rows need not follow device order.

A **placement** is a tuple of (device, first global row, rows), one entry per device holding rows. A plain row map
(`Decision.rows`) places contiguous slices in device (topology) order (`rows_placement`). With shards, every position
j of a replica holds that replica's rows, and a replica's rows sit in the batch where its first device sits in
topology order (`tag.strategy.shard.batch_rows`), which need not be the order of the position-j devices
(`position_placement`: replicas [[0, 3], [1, 2]] put replica 0's rows first, on device 3 at position 1).

`interval_slices(src, dst)` is the one function that says which rows move between two placements;
`tag.strategy.slices` is its special case for two row maps.
"""

from __future__ import annotations

from tag.strategy import Slice, row_offsets

Placement = tuple[tuple[int, int, int], ...]


def rows_placement(rows: tuple[int, ...]) -> Placement:
    """The placement of a row map: contiguous slices in device order.

    >>> rows_placement((2, 0, 3))
    ((0, 0, 2), (2, 2, 3))
    """
    return tuple((d, s, n) for d, (s, n) in enumerate(zip(row_offsets(rows), rows)) if n > 0)


def position_placement(decision, j: int) -> Placement:
    """Where position j of a sharded decision holds the rows: each replica's rows (at its place in the batch) on its
    position-j device; without a shard, the decision's row map.

    >>> from tag.strategy import Decision
    >>> from tag.strategy.shard import Shard
    >>> position_placement(Decision((6, 6, 6, 6), shard=Shard("row", ((0, 3), (1, 2)), (0.5, 0.5))), 1)
    ((2, 6, 6), (3, 0, 6))
    """
    if decision.shard is None:
        return rows_placement(decision.rows)
    starts = row_offsets(decision.batch_rows)
    return tuple(sorted((rep[j], starts[rep[0]], decision.rows[rep[0]]) for rep in decision.shard.replicas))


def interval_slices(src: Placement, dst: Placement) -> list[Slice]:
    """Every row range a device of `dst` needs that another device of `src` holds, ordered by (dst, start).

    >>> interval_slices(((0, 0, 4), (1, 4, 4)), ((1, 0, 6), (0, 6, 2)))
    [Slice(src=1, dst=0, start=6, rows=2), Slice(src=0, dst=1, start=0, rows=4)]
    """
    out = []
    for d, d0, dn in dst:
        for s, s0, sn in src:
            lo, hi = max(d0, s0), min(d0 + dn, s0 + sn)
            if hi > lo and s != d:
                out.append(Slice(s, d, lo, hi - lo))
    return sorted(out, key=lambda x: (x.dst, x.start))

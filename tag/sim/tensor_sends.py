"""Activation messages between groups: a tensor crosses to a device once, however many of its groups read it.

A producer group A's output tensor t (`tag.graph.coarsen.CrossTensor`) read by groups h1 < h2 < ... is needed on
device d by each h with rows there. The piece of t that d needs from device s is, per h, the row slice
`tag.strategy.slices(A.rows, h.rows)` gives for (s, d) (batched t, row maps differing), or t whole from A's first
device to every device of h that A does not run on (unbatched t; also a tensor of no bytes, as a latency-only
message). Pieces equal in (t, s, d, start row, rows) are one piece, read by all their groups on d: it moves once.
Every edge's bytes on (s, d) are moved once per tensor and device instead of once per consuming group.

One message per (A, s, d, readers): the pieces from s to d read by the same groups, so a group never waits for a
tensor it does not read, and with one reader per tensor this is the per-edge message of `SimContext.edge_transfers`
(same bytes, same order). Forward, the message leaves A's forward on s and delivers to the forward of every reader
on d; backward, the readers' gradients of it are summed on d and go back once, after the backward of the last of
them to run (the lowest group: backwards run in reverse group order) to A's backward on s. The memory pass
receives it once, held by that lowest reader (`MemoryInputs.recv`).

Edges with a tensor-sharded end keep their own transfers (`tag.sim.shards.shard_edge_transfers`).

Example: h (4,096 bytes per row) from group 0 on device 0 read by groups 1 and 2 on device 1, 8 rows: one message of
32,768 bytes delivering to both forwards (per edge it was two, 65,536 bytes).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from tag.graph.coarsen import cross_tensors
from tag.sim.collectives import FlowSpec, p2p_spec
from tag.sim.precision import wire_bytes
from tag.strategy import slices

_CACHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # SimContext -> its caches here
_MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class Send:
    """One message of group `producer`'s tensors from device src to device dst, read there by the groups `readers`
    (ascending): `nbytes` at the graph's dtypes (the memory pass's), `fwd` its flow, `bwd` the gradients' flow back."""

    producer: int
    src: int
    dst: int
    readers: tuple[int, ...]
    nbytes: float
    fwd: FlowSpec
    bwd: FlowSpec


@dataclass(frozen=True)
class EdgeFlows:
    """An edge whose transfers stay per edge (`tag.sim.build_parts.edge_flows`): a tensor-sharded end."""

    edge: int
    flows: tuple


def cached_cross_tensors(ctx) -> list:
    """`tag.graph.coarsen.cross_tensors` of ctx's group graph, computed once per context."""
    return _facts(ctx)["tensors"]


def _facts(ctx) -> dict:
    """Per producer group: ([(edge index, consumer group)] in edge order, [(tensor, per-row bytes, fixed bytes,
    per-row wire bytes, fixed wire bytes, readers)]), computed once per context."""
    c = _CACHES.get(ctx)
    if c is None:
        gg = ctx.gg
        precision = getattr(ctx.training, "precision", "fp32")
        per: dict = {g: ([], []) for g in range(gg.n_groups)}
        for ei, e in enumerate(gg.edges):
            per[e.src][0].append((ei, e.dst))
        graph = gg.graph
        tensors = cross_tensors(gg)
        for t in tensors:
            info = graph.tensors.get(t.name) if graph is not None else None
            wr, wf = t.bytes_per_row, t.bytes_fixed
            if info is not None:
                wr = wire_bytes(wr, info.dtype, info.itemsize, precision)
                wf = wire_bytes(wf, info.dtype, info.itemsize, precision)
            per[t.src][1].append((t.name, t.bytes_per_row, t.bytes_fixed, wr, wf, t.dsts))
        touching: list[list[int]] = [[] for _ in range(gg.n_groups)]  # per group, the tensors it makes or reads
        for i, t in enumerate(tensors):
            for g in dict.fromkeys((t.src, *t.dsts)):
                touching[g].append(i)
        c = _CACHES[ctx] = {"facts": per, "sends": {}, "tensors": tensors, "touching": touching}
    return c


def _pieces(producer, consumer, per_row: float, fixed: float) -> list[tuple[int, int, int, int]]:
    """[(src, dst, start row, rows)] of one tensor between two row maps (rows 0, start -1: the whole tensor)."""
    out = []
    if per_row > 0 and producer.rows != consumer.rows:
        out += [(sl.src, sl.dst, sl.start, sl.rows) for sl in slices(producer.rows, consumer.rows)]
    pdevs = producer.devices
    if pdevs and (fixed > 0 or per_row <= 0):
        pset = set(pdevs)
        out += [(pdevs[0], d, -1, 0) for d in consumer.devices if d not in pset]
    return out


def producer_sends(ctx, a: int, decisions, readers: tuple[int, ...]) -> list[Send]:
    """The messages of group a's tensors to the groups `readers` (unsharded, as a): module docstring."""
    cache = _facts(ctx)
    key = (a, decisions[a].rows, tuple((h, decisions[h].rows) for h in readers))
    hit = cache["sends"].get(key)
    if hit is not None:
        return hit
    pieces: dict[tuple, list[int]] = {}  # (tensor index, src, dst, start, rows) -> its readers on dst
    tensors = cache["facts"][a][1]
    for h in readers:
        for i, (_, per_row, fixed, _, _, dsts) in enumerate(tensors):
            if h in dsts:
                for p in _pieces(decisions[a], decisions[h], per_row, fixed):
                    pieces.setdefault((i, *p), []).append(h)
    bundles: dict[tuple, list[float]] = {}  # (src, dst, readers) -> [bytes, wire bytes]
    for (i, s, d, _start, rows), hs in pieces.items():
        _, per_row, fixed, w_row, w_fixed, _ = tensors[i]
        acc = bundles.setdefault((s, d, tuple(hs)), [0.0, 0.0])  # hs ascending: readers are
        acc[0] += rows * per_row if rows else fixed
        acc[1] += rows * w_row if rows else w_fixed
    cl = ctx.cluster
    hit = [Send(a, s, d, hs, b, p2p_spec(cl, s, d, w), p2p_spec(cl, d, s, w))
           for (s, d, hs), (b, w) in sorted(bundles.items(), key=lambda kv: kv[0][2])]
    if len(cache["sends"]) > _MAX_ENTRIES:
        cache["sends"].clear()
    cache["sends"][key] = hit
    return hit


def transfer_plan(ctx, decisions, edge_flows) -> list:
    """The messages of one pass over all groups, in producer order: `Send`s, and `EdgeFlows` for edges with a
    sharded end (`edge_flows(ctx, ei, producer, consumer, decisions)`, `tag.sim.build_parts.edge_flows`)."""
    out: list = []
    facts = _facts(ctx)["facts"]
    for a in range(len(decisions)):
        edges = facts[a][0]
        if not edges:
            continue
        plain = decisions[a].shard is None
        readers = tuple(h for _, h in edges if plain and decisions[h].shard is None)
        sends = producer_sends(ctx, a, decisions, readers) if readers else []
        first = {}
        for x in sends:
            first.setdefault(x.readers[0], []).append(x)
        for ei, h in edges:
            if h in readers:
                out += first.get(h, [])
            else:
                out.append(EdgeFlows(ei, edge_flows(ctx, ei, decisions[a], decisions[h], decisions)))
    return out


def placement_received_bytes(ctx, where: list[int], d: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(received activations, received gradients), bytes, groups x 1, of device d under a whole-group placement
    (`where[g]`: g's device, -1 not placed yet; every placed group runs all `batch` rows), as the simulator's
    memory pairs count them: a tensor made on another placed device and read on d once, by its lowest reader
    there; for a tensor made on d, its gradient once per other device reading it, and once per reader not placed
    yet (headroom: later placements cannot push d over)."""
    n = ctx.gg.n_groups
    fwd, bwd = np.zeros((n, 1)), np.zeros((n, 1))
    facts = _facts(ctx)
    tensors, touching = facts["tensors"], facts["touching"]
    # a tensor neither made nor read on d adds nothing to d; the others in their order (the sums' rounding)
    mine = sorted({i for g, x in enumerate(where) if x == d for i in touching[g]})
    for t in map(tensors.__getitem__, mine):
        nbytes = t.bytes_per_row * batch + t.bytes_fixed
        src = where[t.src]
        if src not in (-1, d):
            here = [h for h in t.dsts if where[h] == d]
            if here:
                fwd[here[0], 0] += nbytes
        elif src == d:
            away = {where[h] for h in t.dsts if where[h] not in (-1, d)}
            bwd[t.src, 0] += nbytes * (len(away) + sum(where[h] == -1 for h in t.dsts))
    return fwd, bwd

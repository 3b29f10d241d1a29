"""Tensor-sharded groups in the simulator (`Decision.shard`, issue 22): their compute, bytes and collectives.

A sharded group's devices form R replicas x k positions (`tag.strategy.shard.Shard`); replica r computes its rows
``rows[replicas[r][0]]`` on each of its k devices. `tag.graph.shardable.analyse_group` says what the split does to
the group's ops (`ShardLayout`); from it, per position j (shares in whole units: ``size_j / U`` of pair p with U
units, `tag.strategy.shard.shard_sizes`):

* **compute** (`sharded_costs`): forward / backward ms at the replica's rows r =
  ``T_share_j(sharded_ops, r) + T(other ops, r)``, with T the cost model's time of those ops (`part_ms`) and
  share_j pair 0's ``size_j / U``: T_s is each op on s of its width, s x its FLOPs and bytes at the efficiency of
  that smaller size, its kernels launched whole (every device of the replica launches each one), not s x T; the
  optimizer step ``update_ms x param_bytes_j / param_bytes``.
* **weights** (`ShardFacts.param_bytes`): a parameter sliced by pair p holds ``size_j / U_p`` of its bytes at
  position j; every other parameter of the group is whole.
* **gradient syncs** (`ShardFacts.sync_bytes`): position j's weight gradients (its slices plus the unsliced
  parameters, less parameters shared with other groups) are summed over `Shard.peers` (the R devices at position
  j), one collective per position; nothing with R = 1.
* **collectives inside a replica** (Megatron's f and g, over the replica's k devices, ring; activation bytes at the
  training precision, `tag.sim.precision.wire_bytes`), per replica after the group's compute:
  forward, an all-reduce of the `reduce_outputs` (bytes = bytes per row x r) and an all-gather of the split
  outputs a consumer needs whole (`gathered_outputs`); backward, an all-reduce of the gradients of the column
  halves' inputs (`column_inputs`; data inputs have none) and an all-gather of the gradients of row halves' inputs
  produced inside the group (its replicated ops need them whole). An all-gather of uneven shares runs as the
  ring of k equal pieces padded to the largest (k x max_j width_j x S for a tensor of S bytes), as gloo and NCCL
  all-gather equal buffers.
* **transfers between groups**: row x feature pieces (`tag.strategy.pieces`), the one function for every slice.
  Forward: the producer's layout of each edge tensor (whole on every position, or band j on position j when left
  split) serves the consumer's (whole on every position, or band j for a row half's input). Backward: the
  consumer's layout of the gradient (band j for a row half's input, else whole) serves the producer's (band j of a
  gathered split output: each device keeps its slice of the gradient; else whole). A column-split output read by
  a row half on the same grid with the same bands moves nothing and is not gathered (the Megatron pair).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tag.graph.shardable import analyse_group
from tag.lru import Recent
from tag.sim.collectives import p2p_spec
from tag.sim.precision import wire_bytes
from tag.strategy.pieces import feature_bands, held_bands, needed_bands, piece_rows
from tag.strategy.shard import shard_sizes


@dataclass
class ShardFacts:
    """What one split at one set of shares does to one group (module docstring); bytes, per position j."""

    layout: object  # tag.graph.shardable.ShardLayout
    share: tuple[float, ...]  # compute share of the sharded ops
    param_bytes: tuple[float, ...]  # the group's parameter bytes a device holds
    sync_bytes: tuple[float, ...]  # its own weight-gradient bytes summed over its peers
    reduce_bytes: tuple[float, float]  # (per row, fixed) wire bytes all-reduced in forward
    column_grad_bytes: tuple[float, float]  # (per row, fixed) wire bytes all-reduced in backward
    narrow_grad: list = field(default_factory=list)  # [(per row, fixed, bands)] all-gathered in backward
    split_bands: dict = field(default_factory=dict)  # split group output -> position bands
    narrow_bands: dict = field(default_factory=dict)  # row half's input tensor -> position bands


def _wire(graph, name: str, precision: str) -> tuple[float, float]:
    """(bytes per row, fixed bytes) of tensor `name` on the wire under `precision`."""
    t = graph.tensors.get(name)
    if t is None:
        return 0.0, 0.0
    r, f = t.bytes_per_row(graph.file_batch), t.bytes_fixed()
    return wire_bytes(r, t.dtype, t.itemsize, precision), wire_bytes(f, t.dtype, t.itemsize, precision)


def _needs_grad(graph, name: str) -> bool:
    t = graph.tensors.get(name)
    return t is not None and t.role not in ("data", "constant", "param") and str(t.dtype).startswith(("float",
                                                                                                       "bfloat"))


def _param_size(graph, name: str) -> float:
    t = graph.tensors.get(name)
    return float(t.numel * t.itemsize) if t is not None and t.numel is not None else 0.0


def shard_facts(gg, g: int, split: str, ratios: tuple[float, ...], precision: str = "fp32") -> ShardFacts:
    """The `ShardFacts` of group g under `split` at `ratios` (module docstring); NotShardable when the split does
    not apply (plan checking refuses such plans first). Cached per GroupGraph."""
    cache = _cache(gg)
    key = (g, split, tuple(ratios), precision)
    hit = cache.get(key)
    if hit is not None:
        return hit
    graph = gg.graph
    grp = gg.groups[g]
    lay = analyse_group(graph, grp.op_ids, split)
    k = len(ratios)
    sizes = [shard_sizes(u, ratios) for u in lay.units]
    share = tuple(sizes[0][j] / lay.units[0] for j in range(k))
    sliced = {}
    for ps in lay.params:
        sliced.setdefault(ps.name, ps.pair)
    shared = {n for n, gids in (getattr(gg, "shared_params", None) or {}).items() if len(set(gids)) > 1}
    held, synced = [0.0] * k, [0.0] * k
    for name in dict.fromkeys(grp.params):
        nbytes = _param_size(graph, name)
        for j in range(k):
            part = nbytes * sizes[sliced[name]][j] / lay.units[sliced[name]] if name in sliced else nbytes
            held[j] += part
            synced[j] += 0.0 if name in shared else part

    def total(names):
        rows = [_wire(graph, n, precision) for n in names]
        return sum(r for r, _ in rows), sum(f for _, f in rows)

    inside = {t for i in grp.op_ids for t in graph.ops[i].outputs}
    narrow_bands = {}
    narrow_grad = []
    for op, slot, pair in lay.narrow_inputs:
        name = graph.ops[op].inputs[slot]
        bands = feature_bands(lay.units[pair], ratios)
        narrow_bands[name] = bands
        if name in inside and _needs_grad(graph, name):
            narrow_grad.append((*_wire(graph, name, precision), bands))
    facts = ShardFacts(
        lay, share, tuple(held), tuple(synced), total(lay.reduce_outputs),
        total([n for n in lay.column_inputs if _needs_grad(graph, n)]), narrow_grad,
        {name: feature_bands(lay.units[p], ratios) for name, (_, p) in lay.split_outputs.items()}, narrow_bands)
    cache[key] = facts
    return facts


_CACHES: Recent = Recent(8)  # id(graph) -> (graph, its shard facts by key)


def _cache(gg) -> dict:
    """The per-GroupGraph cache of `shard_facts` (a few graphs kept)."""
    hit = _CACHES.get(id(gg))
    if hit is None or hit[0] is not gg:
        hit = _CACHES.put(id(gg), (gg, {}))
    return hit[1]


def facts_of(ctx, g: int, decision) -> ShardFacts:
    """`shard_facts` of a sharded decision of group g at ctx's precision."""
    sh = decision.shard
    return shard_facts(ctx.gg, g, sh.split, sh.ratios, getattr(ctx.training, "precision", "fp32"))


def part_ms(cost, gg, g: int, device, rows: int, phase: str, op_ids, share: float = 1.0) -> float:
    """The part of group g's phase ("fwd" / "bwd") time that the ops `op_ids` take, ms, each op on `share` of its
    width (a shard's slice): the cost model's ``ops_ms`` when it has one (the slice's FLOPs and bytes at the
    efficiency of their size, every kernel launched whole), else ``share`` x the group's time x those ops' share
    of its FLOPs in that phase."""
    fn = getattr(cost, "ops_ms", None)
    if fn is not None:
        return fn(g, device, rows, phase, op_ids, share)
    whole = cost.group_fwd_ms(g, device, rows) if phase == "fwd" else cost.group_bwd_ms(g, device, rows)
    ops = gg.graph.ops

    def flops(i):
        o = ops[i]
        return (o.fwd_flops_per_row * rows + o.fwd_flops_fixed if phase == "fwd"
                else o.bwd_flops_per_row * rows + o.bwd_flops_fixed)

    every = sum(flops(i) for i in gg.groups[g].op_ids)
    return share * whole * sum(flops(i) for i in op_ids) / every if every > 0 else 0.0


def sharded_costs(ctx, g: int, decision) -> tuple:
    """(devices, fwd ms, bwd ms, update ms per device) of a sharded group (module docstring), as
    `SimContext.group_costs` gives them for an unsharded one."""
    facts = facts_of(ctx, g, decision)
    cost, dt, gg = ctx.cost, ctx.dtypes, ctx.gg
    pos = decision.shard.position()
    ops = sorted(facts.layout.sharded_ops)
    total_params = sum(facts.param_bytes) / max(len(facts.param_bytes), 1) if not gg.groups[g].param_bytes else \
        gg.groups[g].param_bytes
    devs = list(decision.devices)
    per: dict = {}
    out = ([], [], [])
    for d in devs:
        j, rows = pos[d][1], decision.rows[d]
        key = (dt[d], rows, j)
        if key not in per:
            times = []
            for phase, whole in (("fwd", cost.group_fwd_ms), ("bwd", cost.group_bwd_ms)):
                w = whole(g, dt[d], rows)
                part = part_ms(cost, gg, g, dt[d], rows, phase, ops)
                times.append(part_ms(cost, gg, g, dt[d], rows, phase, ops, facts.share[j]) + (w - part))
            upd = cost.update_ms(g, dt[d])
            times.append(upd * facts.param_bytes[j] / total_params if total_params > 0 else upd)
            per[key] = times
        for lst, t in zip(out, per[key]):
            lst.append(t)
    return devs, out[0], out[1], out[2]


def gathered_outputs(gg, g: int, decisions, precision: str = "fp32") -> set[str]:
    """The split outputs of sharded group g that are all-gathered in its replicas: all of them but those read only
    by row halves of groups on the same grid with the same bands (the Megatron pair), and never a graph output."""
    dec = decisions[g]
    facts = shard_facts(gg, g, dec.shard.split, dec.shard.ratios, precision)
    graph = gg.graph
    gid = _group_of_op(gg)
    out = set()
    for name, bands in facts.split_bands.items():
        t = graph.tensors.get(name)
        readers = {gid[c] for c in (t.consumers if t is not None else []) if gid.get(c, g) != g}
        keep = name not in graph.outputs and bool(readers)
        for c in readers:
            other = decisions[c]
            if not keep or other.shard is None or other.shard.replicas != dec.shard.replicas:
                keep = False
                break
            cf = shard_facts(gg, c, other.shard.split, other.shard.ratios, precision)
            keep = cf.narrow_bands.get(name) == bands
        if not keep:
            out.add(name)
    return out


def _group_of_op(gg) -> dict[int, int]:
    cache = _cache(gg)
    hit = cache.get("group_of_op")
    if hit is None:
        hit = cache["group_of_op"] = gg.group_of_op()
    return hit


def _padded(k: int, bands) -> float:
    """A ring all-gather's buffer over k devices of uneven `bands`, as a fraction of the tensor: k equal pieces of
    the widest band."""
    return float(k * max(hi - lo for lo, hi in bands))


@dataclass
class ReplicaCollectives:
    """The collectives of one replica of a sharded group after its forward or backward: (method, bytes) in order
    over `devices` (position order)."""

    devices: tuple[int, ...]
    steps: list[tuple[str, float]]


def replica_collectives(ctx, g: int, decisions, phase: str) -> list[ReplicaCollectives]:
    """Per replica of sharded group g, its collectives after its `phase` ("fwd" or "bwd") (module docstring);
    replicas with none are left out."""
    dec = decisions[g]
    facts = facts_of(ctx, g, dec)
    k = dec.shard.k
    out = []
    if phase == "fwd":
        gathered = gathered_outputs(ctx.gg, g, decisions, getattr(ctx.training, "precision", "fp32"))
        gathers = [(*_wire(ctx.gg.graph, n, getattr(ctx.training, "precision", "fp32")), facts.split_bands[n])
                   for n in sorted(gathered)]
        reduces = facts.reduce_bytes
    else:
        gathers = facts.narrow_grad
        reduces = facts.column_grad_bytes
    pads = [(r, f, _padded(k, bands)) for r, f, bands in gathers]  # the same for every replica
    for rep in dec.shard.replicas:
        rows = dec.rows[rep[0]]
        steps = []
        s = reduces[0] * rows + reduces[1]
        if s > 0:
            steps.append(("ring", s))
        g_bytes = sum((r * rows + f) * pad for r, f, pad in pads)
        if g_bytes > 0:
            steps.append(("allgather", g_bytes))
        if steps:
            out.append(ReplicaCollectives(tuple(rep), steps))
    return out


def _tensor_layouts(ctx, e, producer, consumer, decisions, precision: str):
    """Per tensor of edge e: (bytes per row, fixed bytes at `precision`, forward bands held by the producer, needed
    by the consumer; backward bands held by the consumer, needed by the producer), bands None = whole."""
    graph, prec, src, dst = ctx.gg.graph, getattr(ctx.training, "precision", "fp32"), e.src, e.dst
    pf = facts_of(ctx, src, producer) if producer.shard is not None else None
    cf = facts_of(ctx, dst, consumer) if consumer.shard is not None else None
    gathered = gathered_outputs(ctx.gg, src, decisions, prec) if pf is not None else set()
    out = []
    for name in e.tensors:
        split = pf.split_bands.get(name) if pf is not None else None
        hold = None if split is None or name in gathered else split
        grad_need = split  # a gathered output's gradient: each position keeps its band
        need = cf.narrow_bands.get(name) if cf is not None else None
        out.append((*_wire(graph, name, precision), hold, need, need, grad_need))
    return out


def shard_edge_pairs(ctx, ei: int, producer, consumer, decisions, precision: str = "fp32") -> tuple[dict, dict]:
    """({(src device, dst device): bytes} forward, the same backward) of edge ei when either end is sharded, tensors
    at `precision` (`tag.sim.precision.wire_bytes`; fp32: the graph's dtypes, as the memory pass reads them):
    the row x feature pieces of each tensor (`tag.strategy.pieces`), merged per device pair; unbatched bytes go
    whole from the first producer device to each consumer device that is not a producer device (and back); a
    device pair with nothing to move but no other link between the two groups gets a latency-only message."""
    e = ctx.gg.edges[ei]
    fwd: dict = {}
    bwd: dict = {}
    for per_row, fixed, hold, need, ghold, gneed in _tensor_layouts(ctx, e, producer, consumer, decisions,
                                                                    precision):
        if per_row > 0:
            for src, dst, rows, fraction in piece_rows(held_bands(producer, hold), needed_bands(consumer, need)):
                fwd[(src, dst)] = fwd.get((src, dst), 0.0) + rows * per_row * fraction
            for src, dst, rows, fraction in piece_rows(held_bands(consumer, ghold), needed_bands(producer, gneed)):
                bwd[(src, dst)] = bwd.get((src, dst), 0.0) + rows * per_row * fraction
        if fixed > 0:
            for d in consumer.devices:
                if d not in producer.devices:
                    fwd[(producer.devices[0], d)] = fwd.get((producer.devices[0], d), 0.0) + fixed
                    bwd[(d, producer.devices[0])] = bwd.get((d, producer.devices[0]), 0.0) + fixed
    pset, cset = set(producer.devices), set(consumer.devices)
    for d in consumer.devices:  # every consumer device waits for the producer
        if d not in pset and not any(dst == d for _, dst in fwd):
            fwd[(producer.devices[0], d)] = 0.0
    for s in producer.devices:  # and every producer device's backward for the consumer's
        if s not in cset and not any(dst == s for _, dst in bwd):
            bwd[(consumer.devices[0], s)] = 0.0
    return fwd, bwd


def shard_edge_transfers(ctx, ei: int, producer, consumer, decisions) -> tuple[list, list, list]:
    """`shard_edge_pairs` as flows at the training precision: ([(src, dst, FlowSpec)] forward, the same backward,
    and the forward pairs at the graph's dtypes [(src, dst, bytes)] for the memory pass)."""
    prec = getattr(ctx.training, "precision", "fp32")
    fwd, bwd = shard_edge_pairs(ctx, ei, producer, consumer, decisions, prec)
    mem = fwd if prec == "fp32" else shard_edge_pairs(ctx, ei, producer, consumer, decisions)[0]
    cl = ctx.cluster
    return ([(s, d, p2p_spec(cl, s, d, b)) for (s, d), b in fwd.items()],
            [(s, d, p2p_spec(cl, s, d, b)) for (s, d), b in bwd.items()],
            [(s, d, b) for (s, d), b in mem.items()])


def position_syncs(ctx, g: int, decision) -> list[tuple[tuple[int, ...], float]]:
    """Per position j of a replicated sharded group: (its peers in topology order, the weight-gradient bytes they
    sum); [] with one replica."""
    if not decision.replicated:
        return []
    facts = facts_of(ctx, g, decision)
    first = decision.shard.replicas[0]
    return [(tuple(sorted(decision.shard.peers(first[j]))), facts.sync_bytes[j]) for j in range(decision.shard.k)]



def split_activation_fraction(gg, g: int, facts: ShardFacts) -> float:
    """The share of group g's activation bytes per row (the tensors its ops produce) that the split leaves split."""
    graph = gg.graph
    fb = graph.file_batch
    made = {t for i in gg.groups[g].op_ids if not graph.ops[i].is_weight_generator for t in graph.ops[i].outputs}
    every = sum(graph.tensors[t].bytes_per_row(fb) for t in made if t in graph.tensors)
    split = sum(graph.tensors[t].bytes_per_row(fb) for t in made if t in graph.tensors and t in
                facts.layout.split_tensors)
    return split / every if every > 0 else 0.0


def shard_memory(ctx, decisions, param_bytes, state_bytes, inv_n):
    """The memory pass's per group x device terms with shards (`tag.sim.memory.memory_terms`), or None when no
    decision has one: a sharded group's device at position j holds ``param_bytes_j`` of its weights (and its
    gradients), its optimizer states in proportion, ZeRO shards over its R replicas (inv_n = 1 / R), and its
    activations at ``1 - f (1 - share_j)`` of their bytes, f the group's split share of them
    (`split_activation_fraction`). Arguments: the unsharded (groups x 1) columns; returns groups x devices
    (params, states, inv_n, activation scale)."""
    if all(d.shard is None for d in decisions):
        return None
    n_dev = len(decisions[0].rows)
    p = np.repeat(np.asarray(param_bytes, dtype=float).reshape(-1, 1), n_dev, axis=1)
    st = np.repeat(np.asarray(state_bytes, dtype=float).reshape(-1, 1), n_dev, axis=1)
    inv = np.repeat(np.asarray(inv_n, dtype=float).reshape(-1, 1), n_dev, axis=1)
    act = np.ones_like(p)
    for g, dec in enumerate(decisions):
        if dec.shard is None:
            continue
        facts = facts_of(ctx, g, dec)
        frac = split_activation_fraction(ctx.gg, g, facts)
        whole = p[g, 0]
        for d, (_, j) in dec.shard.position().items():
            p[g, d] = facts.param_bytes[j]
            st[g, d] = st[g, d] * facts.param_bytes[j] / whole if whole > 0 else st[g, d]
            act[g, d] = 1.0 - frac * (1.0 - facts.share[j])
        inv[g, :] = 1.0 / len(dec.shard.replicas)
    return p, st, inv, act

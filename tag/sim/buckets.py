"""Gradient buckets: which groups' gradients one collective sums, and by which algorithm.

A replicated group's **own sync bytes** are the bytes of the parameters only it reads (a parameter read by several
groups syncs once over the union of their devices, `tag.sim.gradsync.shared_params`), less the weights its SFB ops
send as sufficient factors (`tag.sim.sfb`): the parameters deploy's buckets hold for it (`tag.deploy.bucket_plan`).

Buckets are formed as DDP forms them (`bucket_cap_mb`): walk the groups in the order their gradients become ready
(reverse backward order: group K-1 first); a group with own sync bytes joins the open bucket when it
has the same replica set (devices), the same `Decision.sync` (and ps server) and the open bucket holds fewer than
``cap = bucket_mb x 2^20`` bytes; otherwise it opens a new bucket. A group larger than the cap is a bucket of its
own (tag fuses whole groups; DDP also fuses whole parameters). ``bucket_mb = 0`` gives one bucket per group.

A bucket is one collective kind: its groups share one ZeRO stage (`Decision.zero`; stages 1-3 reduce-scatter,
`tag.sim.zero`), and a zero-3 group is a bucket of its own (FSDP's unit: its gradients are reduce-scattered as
soon as its backward ends).

A bucket's algorithm is its groups' `Decision.sync` (None = ring), or for ``"auto"`` the cheapest of
`tag.strategy.BY_COST` for the bucket's bytes on its devices (`tag.sim.algorithms.choose_algorithm`).

Example: groups 2, 1, 0 of 10, 20 and 30 MiB on the same devices with a 25 MiB cap give buckets [2, 1] (30 MiB:
group 1 joins at 10 MiB < 25) and [0].
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.sim.gradsync import shared_params, tensor_bytes
from tag.sim.sfb import group_sfb_factors
from tag.strategy import AUTO, Bucket

MIB = 2 ** 20


@dataclass(frozen=True)
class BucketSync:
    """A bucket with what its collective needs: the replica set (device indices, topology order) and the bytes.
    A bucket of sharded groups runs one collective per position instead: `positions` = ((its peers in topology
    order, bytes), ...), whose bytes sum to `nbytes`; () otherwise."""

    bucket: Bucket
    devices: tuple[int, ...]
    nbytes: float
    positions: tuple = ()


def position_bytes(gg, g: int, decision) -> tuple[float, ...]:
    """Per position of a sharded decision, the weight-gradient bytes its peers sum (`tag.sim.shards.ShardFacts`)."""
    from tag.sim.shards import shard_facts

    return shard_facts(gg, g, decision.shard.split, decision.shard.ratios).sync_bytes


def replica_key(decision):
    """What a bucket's groups share: their devices, or for sharded groups their grid and shares."""
    sh = decision.shard
    return decision.devices if sh is None else ("shard", sh.replicas, sh.ratios)


_last_own: list = [None, None, ()]  # (gg, decisions, own_sync_bytes) of the last call


def own_sync_bytes(gg, decisions) -> list[float]:
    """Per group, the bytes of its own gradient sync (module docstring); 0 for groups on one device. A sharded
    group's are the sum over its positions (`position_bytes`; 0 with one replica).

    The last call's answer is kept: the bucket derivation, the bucket syncs and ZeRO's shard bytes of one
    simulation ask for the same decisions tuple in turn (decisions and group graphs are not changed once made; the
    kept pair is held, so its identity cannot pass to another object)."""
    last = _last_own
    if last[1] is decisions and last[0] is gg:
        return list(last[2])
    out = _own_sync_bytes(gg, decisions)
    if type(decisions) is tuple:  # a list may change under the same identity
        last[:] = gg, decisions, tuple(out)
    return out


def _own_sync_bytes(gg, decisions) -> list[float]:
    """`own_sync_bytes` computed: a group's param_bytes less the shared parameters counted in it. A group's
    ``param_bytes`` counts each parameter at its first reader in op order (`tag.graph.load`), which for a shared
    parameter need not be in the lowest group id reading it (`_counted_in`)."""
    counted: dict[int, float] = {}
    for name, gids in shared_params(gg).items():
        g = _counted_in(gg, name, gids)
        counted[g] = counted.get(g, 0.0) + tensor_bytes(gg, name)
    out = []
    for g, dec in enumerate(decisions):
        grp = gg.groups[g]
        if not dec.replicated or grp.param_bytes <= 0:
            out.append(0.0)
            continue
        if dec.shard is not None:
            out.append(float(sum(position_bytes(gg, g, dec))))
            continue
        nbytes = grp.param_bytes - counted.get(g, 0.0)
        nbytes -= sum(f.weight_bytes for f in group_sfb_factors(gg, g, dec))
        out.append(max(0.0, nbytes))
    return out


def _counted_in(gg, name: str, gids) -> int:
    """The group among `gids` whose op first reads parameter `name` in op order (where its bytes are counted); the
    lowest id when the graph's ops do not name their parameters."""
    ops = getattr(getattr(gg, "graph", None), "ops", None)
    if not ops:
        return gids[0]
    first = min(((i, g) for g in gids for i in gg.groups[g].op_ids if name in ops[i].params), default=None)
    return first[1] if first is not None else gids[0]


def derive_buckets(gg, decisions, bucket_mb: float, choose) -> tuple[Bucket, ...]:
    """The buckets of `decisions` under a `bucket_mb` cap (module docstring); `choose(devices, nbytes) -> str`
    names the algorithm of an ``"auto"`` bucket."""
    cap = float(bucket_mb) * MIB
    own = own_sync_bytes(gg, decisions)
    open_: list = []  # [key, groups, bytes] of the bucket being filled, or empty
    closed: list = []
    for g in range(len(decisions) - 1, -1, -1):
        if own[g] <= 1e-9:
            continue
        dec = decisions[g]
        sync = dec.sync or "ring"
        key = (replica_key(dec), sync, dec.server if sync == "ps" else None, dec.zero)
        if open_ and open_[0] == key and open_[2] < cap and dec.zero < 3:
            open_[1].append(g)
            open_[2] += own[g]
        else:
            if open_:
                closed.append(open_)
            open_ = [key, [g], own[g]]
    if open_:
        closed.append(open_)
    out = []
    for (devices, sync, server, _), groups, nbytes in closed:
        if sync == AUTO and decisions[groups[0]].shard is not None:  # chosen for position 0's collective
            dec = decisions[groups[0]]
            devices = tuple(sorted(dec.shard.peers(dec.shard.replicas[0][0])))
            nbytes = sum(position_bytes(gg, g, decisions[g])[0] for g in groups)
        algorithm = choose(devices, nbytes) if sync == AUTO else sync
        out.append(Bucket(tuple(groups), algorithm, server))
    return tuple(out)


def bucket_syncs(gg, strategy, buckets: tuple[Bucket, ...]) -> list[BucketSync]:
    """Each bucket with its devices (its first group's) and its bytes (the sum of its groups' own sync bytes)."""
    own = own_sync_bytes(gg, strategy.decisions)
    out = []
    for b in buckets:
        dec = strategy.decisions[b.groups[0]]
        positions = ()
        if dec.shard is not None:
            per = [position_bytes(gg, g, strategy.decisions[g]) for g in b.groups]
            positions = tuple((tuple(sorted(dec.shard.peers(d))), float(sum(p[j] for p in per)))
                              for j, d in enumerate(dec.shard.replicas[0]))
        out.append(BucketSync(b, dec.devices, float(sum(own[g] for g in b.groups)), positions))
    return out


def check_buckets(gg, strategy, buckets: tuple[Bucket, ...]) -> str | None:
    """Why explicit `buckets` do not fit the strategy's decisions (None when they do): every group with own sync
    bytes in exactly one bucket, no other group in any, and the groups of a bucket on one replica set and one ZeRO
    stage. The message names the bucket index and what is wrong."""
    own = own_sync_bytes(gg, strategy.decisions)
    seen: dict[int, int] = {}
    for i, b in enumerate(buckets):
        if not b.groups:
            return f"buckets[{i}].groups: expected at least one group, found none"
        for g in b.groups:
            if g in seen:
                return f"buckets[{i}].groups: group {g} is already in buckets[{seen[g]}]"
            seen[g] = i
            if own[g] <= 1e-9:
                return f"buckets[{i}].groups: group {g} has no gradients to sync (one device or no own parameters)"
            if replica_key(strategy.decisions[g]) != replica_key(strategy.decisions[b.groups[0]]):
                return (f"buckets[{i}].groups: group {g} runs on other devices than group {b.groups[0]}; a bucket's "
                        "groups share one replica set")
            if strategy.decisions[g].zero != strategy.decisions[b.groups[0]].zero:
                return (f"buckets[{i}].groups: group {g} has another ZeRO stage than group {b.groups[0]}; a bucket's "
                        "groups share one zero stage")
    missing = [g for g, b in enumerate(own) if b > 1e-9 and g not in seen]
    if missing:
        return f"buckets: group {missing[0]} syncs gradients but is in no bucket"
    return None

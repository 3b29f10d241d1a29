"""plan.json version 2 ``shard`` (docs/plan.md § shards): writing, reading and checking one decision's shard.

    "shard": {"split": "column", "ratios": {"m0/0": 0.75, "m0/1": 0.25}}
    "shard": {"split": "heads", "replicas": [["m0/0", "m0/1"], ["m1/0", "m1/1"]],
              "ratios": {"m0/0": 0.5, "m0/1": 0.5, "m1/0": 0.5, "m1/1": 0.5}}

``replicas`` lists the R replicas, each its k devices in position order; without it the group's devices (those
with rows, topology order) are one replica. A replica's rows sit in the batch where its first device sits in
topology order (`tag.strategy.shard.batch_rows`). ``ratios`` gives every grid device its share. What the
file alone can say is checked here (`parse_shard`); the split against the group's ops is `tag.strategy.plancheck`'s.
"""

from __future__ import annotations

import math

from tag.errors import InputError, short_repr
from tag.strategy.shard import RATIO_TOL, SPLITS, Shard


def shard_to_json(shard: Shard | None, device_ids) -> dict:
    """The decision's ``shard`` key ({} without a shard); ``replicas`` when there is more than one, or when the one
    replica's positions are not in topology order (reading without it would reorder them).

    >>> shard_to_json(Shard("column", ((0, 1),), (0.75, 0.25)), ["a", "b"])
    {'shard': {'split': 'column', 'ratios': {'a': 0.75, 'b': 0.25}}}
    >>> shard_to_json(Shard("column", ((1, 0),), (0.75, 0.25)), ["a", "b"])["shard"]["replicas"]
    [['b', 'a']]
    """
    if shard is None:
        return {}
    out = {"split": shard.split}
    if len(shard.replicas) > 1 or list(shard.replicas[0]) != sorted(shard.replicas[0]):
        out["replicas"] = [[device_ids[d] for d in rep] for rep in shard.replicas]
    out["ratios"] = {device_ids[d]: float(shard.ratios[j]) for rep in shard.replicas for j, d in enumerate(rep)}
    return {"shard": out}


def shard_replica_ids(d: dict, path: str, where: str) -> list[list[str]] | None:
    """The replicas of decision `d` as device ids (None without a shard), checked for shape: a list of lists of
    device ids, each device once, k >= 2 devices in every replica, every replica's devices with equal rows, and
    exactly the devices with rows. Needed before the row sum (a sharded group's rows count once per replica)."""
    raw = d.get("shard")
    if raw is None:
        return None
    w = f"{where}.shard"
    if not isinstance(raw, dict):
        raise InputError(path, w, 'an object {"split": ..., "ratios": {...}}', short_repr(raw))
    rows = d["rows"]
    reps = raw.get("replicas")
    if reps is None:
        reps = [list(rows)]
    elif not (isinstance(reps, list) and reps and all(isinstance(r, list) and all(isinstance(x, str) for x in r)
                                                      for r in reps)):
        raise InputError(path, f"{w}.replicas", "a non-empty list of lists of device ids", short_repr(reps))
    if len({len(x) for x in reps}) != 1:
        raise InputError(path, f"{w}.replicas", "replicas of equal size (a grid of replicas x positions)",
                         short_repr([len(x) for x in reps]))
    seen: set[str] = set()
    for r, rep in enumerate(reps):
        if len(rep) < 2:
            raise InputError(path, f"{w}.replicas[{r}]" if "replicas" in raw else w,
                             "at least two devices per replica to shard over", short_repr(rep))
        for dev in rep:
            if dev in seen:
                raise InputError(path, f"{w}.replicas[{r}]", "each device in one replica once", f"{dev} twice")
            seen.add(dev)
        counts = {rows.get(dev) for dev in rep}
        if len(counts) != 1:
            raise InputError(path, f"{w}.replicas[{r}]", "devices with equal rows (a replica's devices all compute "
                             "its rows)", short_repr({dev: rows.get(dev) for dev in rep}))
    if seen != set(rows):
        missing = sorted(set(rows) - seen) or sorted(seen - set(rows))
        raise InputError(path, f"{w}.replicas", "exactly the devices with rows", f"{missing[0]} differs")
    return [list(rep) for rep in reps]


def parse_shard(d: dict, path: str, where: str, replica_ids: list[list[str]] | None, index: dict) -> Shard | None:
    """The Shard of decision `d` (device ids mapped by `index`), its split and ratios checked: a known split,
    a positive finite share for every grid device, each replica's shares summing to 1, and position j's share the
    same in every replica."""
    if replica_ids is None:
        return None
    raw, w = d["shard"], f"{where}.shard"
    split = raw.get("split")
    if split not in SPLITS:
        raise InputError(path, f"{w}.split", "one of " + ", ".join(SPLITS), short_repr(split))
    ratios = raw.get("ratios")
    if not isinstance(ratios, dict):
        raise InputError(path, f"{w}.ratios", "an object device id -> share", short_repr(ratios))
    for rep in replica_ids:
        for dev in rep:
            v = ratios.get(dev)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                raise InputError(path, f"{w}.ratios.{dev}", "a positive share for every device of the shard",
                                 short_repr(v))
    extra = sorted(set(ratios) - {dev for rep in replica_ids for dev in rep})
    if extra:
        raise InputError(path, f"{w}.ratios.{extra[0]}", "shares only for the shard's devices", short_repr(ratios[extra[0]]))
    first = [float(ratios[dev]) for dev in replica_ids[0]]
    for r, rep in enumerate(replica_ids):
        total = sum(ratios[dev] for dev in rep)
        if abs(total - 1.0) > RATIO_TOL:
            raise InputError(path, f"{w}.ratios", f"the shares of replica {r} summing to 1", f"sum {total:.6g}")
        for j, dev in enumerate(rep):
            if abs(ratios[dev] - first[j]) > RATIO_TOL:
                raise InputError(path, f"{w}.ratios.{dev}", f"the share of position {j} in replica 0 ({first[j]:g}): "
                                 "every replica splits the weights alike", short_repr(ratios[dev]))
    for rep in replica_ids:
        for dev in rep:
            if dev not in index:
                raise InputError(path, f"{w}.replicas", "device ids of the topology", short_repr(dev))
    return Shard(split, tuple(tuple(index[dev] for dev in rep) for rep in replica_ids), tuple(first))

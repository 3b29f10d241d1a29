"""plan.json (docs/plan.md), reading: versions 1 and 2, with structural checks (`read_plan`, `parse_plan`).

Version 1 files read as one bucket per group (``bucket_mb`` 0) with sync ``allreduce`` as ``ring`` and
``hierarchical`` as ``leader``. A plan names devices by id (``m0/1``) and groups by their op names; a `Strategy`
names devices by topology index. Reading therefore needs the device order: from the cluster when one is given,
otherwise a device order consistent with every row map in the file (rows are written in topology order). Checks
against a loaded model and cluster live in `tag.strategy.plancheck`; writing is `tag.strategy.planfile`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from tag.errors import InputError, short_repr
from tag.strategy import AUTO, OPTIMIZERS, SYNC_METHODS, V1_SYNC_NAMES, Bucket, Decision, Strategy, TrainingConfig
from tag.strategy.memory_decisions import PRECISIONS, check_precision_supported, parse_memory
from tag.strategy.planfile import PLAN_VERSION
from tag.strategy.planfile_pipeline import parse_pipeline, stage_device_lists
from tag.strategy.planfile_shard import parse_shard, shard_replica_ids

READ_VERSIONS = (1, 2)
PLAN_LOSSES = ("mse", "cross_entropy", "nll", "bce")  # the named losses tag deploy trains with (`tag.deploy.loss`)
_V2_SYNCS = SYNC_METHODS + (AUTO,)


@dataclass
class PlanMeta:
    """Everything in a plan besides the per-group decisions.

    groups[g] lists the op names of group g; device_ids[d] is the device id of index d in the
    Strategy's row tuples. predicted / baselines / search are kept as the JSON objects they are.
    """

    path: str
    model_path: str
    model_sha256: str
    batch_size: int
    topology_path: str
    topology_sha256: str
    training: TrainingConfig
    groups: list[list[str]]
    device_ids: tuple[str, ...]
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    predicted: dict | None = None
    baselines: dict | None = None
    search: dict | None = None


def resolve_recorded(path: str, plan_path: str) -> str | None:
    """The existing file a plan's recorded `path` names: the path as written (absolute, or relative to the working
    directory in plans that recorded paths as given), else the same relative path beside the plan, else a file of
    that name beside the plan (a plan moved together with its inputs); None when none exists."""
    here = os.path.dirname(os.path.abspath(plan_path))
    for cand in (path, os.path.normpath(os.path.join(here, path)), os.path.join(here, os.path.basename(path))):
        if os.path.isfile(cand):
            return cand
    return None


def load_plan_json(path: str) -> dict:
    """Parse a plan file into its JSON object (InputError if unreadable, not JSON, or not version 1 or 2)."""
    try:
        with open(path) as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise InputError(path, "file", "an existing plan.json", "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(path, "file", "a readable plan.json", type(e).__name__) from None
    except json.JSONDecodeError as e:
        raise InputError(path, f"line {e.lineno} column {e.colno}", "valid JSON", e.msg) from None
    if not isinstance(raw, dict):
        raise InputError(path, "top level", "a JSON object", type(raw).__name__)
    if raw.get("version") not in READ_VERSIONS:
        raise InputError(path, "version", "1 or 2", short_repr(raw.get("version")))
    return raw


def read_plan(path: str, cluster=None) -> tuple[Strategy, PlanMeta]:
    """Read and structurally check a plan file: the Strategy and the rest of the plan.

    With `cluster`, device indices are the cluster's topology order and unknown device ids are errors;
    without, the order is one consistent with every row map in the file (PlanMeta.device_ids; ps
    servers that compute no rows anywhere come after, in order of appearance).
    """
    return parse_plan(load_plan_json(path), path, cluster)


def parse_plan(raw: dict, path: str, cluster=None) -> tuple[Strategy, PlanMeta]:
    """`read_plan` on an already parsed JSON object; `path` names the file in error messages."""
    version = raw.get("version", PLAN_VERSION)
    if version not in READ_VERSIONS:
        raise InputError(path, "version", "1 or 2", short_repr(version))
    model = _obj(raw, "model", path)
    topo = _obj(raw, "topology", path)
    batch = _pos_int(model.get("batch_size"), path, "model.batch_size")
    shapes = {}
    for name, dims in _obj(model, "input_shapes", path, "model.input_shapes", default={}).items():
        if not (isinstance(dims, list) and dims and all(_is_pos_int(d) for d in dims)):
            raise InputError(path, f"model.input_shapes.{name}", "a list of positive integers", short_repr(dims))
        shapes[name] = tuple(dims)
    training = _training(_obj(raw, "training", path, default={}), path)

    groups_raw = raw.get("groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise InputError(path, "groups", "a non-empty list of groups", short_repr(groups_raw))
    groups: list[list[str]] = []
    for g, entry in enumerate(groups_raw):
        if not isinstance(entry, dict) or entry.get("id") != g:
            raise InputError(path, f"groups[{g}].id", str(g), short_repr(entry.get("id") if isinstance(entry, dict) else entry))
        ops = entry.get("ops")
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise InputError(path, f"groups[{g}].ops", "a list of op names", short_repr(ops))
        groups.append(list(ops))

    decs_raw = raw.get("decisions")
    if not isinstance(decs_raw, list) or len(decs_raw) != len(groups):
        found = f"{len(decs_raw)} decisions" if isinstance(decs_raw, list) else short_repr(decs_raw)
        raise InputError(path, "decisions", f"one decision per group ({len(groups)})", found)
    by_group: dict[int, tuple[int, dict]] = {}
    for i, d in enumerate(decs_raw):
        if not isinstance(d, dict):
            raise InputError(path, f"decisions[{i}]", "an object", short_repr(d))
        g = d.get("group")
        if not (isinstance(g, int) and not isinstance(g, bool) and 0 <= g < len(groups)) or g in by_group:
            raise InputError(path, f"decisions[{i}].group", f"a group id in 0..{len(groups) - 1} used once", short_repr(g))
        by_group[g] = (i, d)
    decs = [by_group[g] for g in range(len(groups))]

    replica_ids: dict[int, list[list[str]] | None] = {}
    for i, d in decs:
        rows = d.get("rows")
        if not isinstance(rows, dict) or not rows:
            raise InputError(path, f"decisions[{i}].rows", "an object device id -> rows", short_repr(rows))
        for dev, r in rows.items():
            if not _is_pos_int(r):
                raise InputError(path, f"decisions[{i}].rows.{dev}", "a positive integer", short_repr(r))
        reps = shard_replica_ids(d, path, f"decisions[{i}]") if version == 2 else None
        replica_ids[i] = reps
        total = sum(rows.values()) if reps is None else sum(rows[rep[0]] for rep in reps)
        if total != batch:
            raise InputError(path, f"decisions[{i}].rows", f"rows summing to model.batch_size {batch}"
                             + (" (each replica of the shard once)" if reps is not None else ""), f"sum {total}")
    if cluster is not None:
        check_precision_supported(cluster, training.precision, path, "training.precision")
        device_ids = tuple(dev.id for dev in cluster.devices)
    else:
        servers = [[d["server"]] for _, d in decs if d.get("sync") == "ps" and isinstance(d.get("server"), str)]
        stage_devs = stage_device_lists(raw) if version == 2 else []
        device_ids = _device_order([list(d["rows"]) for _, d in decs] + servers + stage_devs, path)
    index = {dev: k for k, dev in enumerate(device_ids)}

    decisions = []
    for i, d in decs:
        rows = [0] * len(device_ids)
        for dev, r in d["rows"].items():
            if dev not in index:
                raise InputError(path, f"decisions[{i}].rows.{dev}", "a device id of the topology", short_repr(dev))
            rows[index[dev]] = r
        sync, server = d.get("sync"), d.get("server")
        if version == 1:
            if sync is not None and sync not in V1_SYNC_NAMES:
                raise InputError(path, f"decisions[{i}].sync", "null or one of " + ", ".join(V1_SYNC_NAMES),
                                 short_repr(sync))
            sync = V1_SYNC_NAMES.get(sync)
        elif sync is not None and sync not in _V2_SYNCS:
            raise InputError(path, f"decisions[{i}].sync", "null or one of " + ", ".join(_V2_SYNCS), short_repr(sync))
        if sync == "ps":
            if server not in index:
                raise InputError(path, f"decisions[{i}].server", "a device id of the topology for sync ps", short_repr(server))
        elif server is not None:
            raise InputError(path, f"decisions[{i}].server", f"null when sync is {sync!r}", short_repr(server))
        sfb = d.get("sfb", [])
        if not isinstance(sfb, list) or not all(isinstance(s, str) for s in sfb):
            raise InputError(path, f"decisions[{i}].sfb", "a list of op names", short_repr(sfb))
        reps = replica_ids[i]
        memory = parse_memory(d, path, f"decisions[{i}]", None if reps is None else len(reps)) if version == 2 else {}
        shard = parse_shard(d, path, f"decisions[{i}]", replica_ids[i], index)
        decisions.append(Decision(rows=tuple(rows), sync=sync,
                                  server=index[server] if server is not None else None, sfb=tuple(sfb), shard=shard, **memory))
    meta = PlanMeta(
        path=str(path), model_path=_str(model, "path", path, "model.path"),
        model_sha256=_str(model, "sha256", path, "model.sha256"), batch_size=batch,
        topology_path=_str(topo, "path", path, "topology.path"),
        topology_sha256=_str(topo, "sha256", path, "topology.sha256"),
        training=training, groups=groups, device_ids=device_ids, input_shapes=shapes,
        predicted=raw.get("predicted"), baselines=raw.get("baselines"), search=raw.get("search"))
    if version == 1:
        return Strategy(tuple(decisions)), meta
    bucket_mb = raw.get("bucket_mb")
    if not isinstance(bucket_mb, (int, float)) or isinstance(bucket_mb, bool) or not math.isfinite(bucket_mb) \
            or bucket_mb < 0:
        raise InputError(path, "bucket_mb", "a number >= 0 (the bucket cap in MiB; 0 = one bucket per group)",
                         short_repr(bucket_mb))
    buckets = _parse_buckets(raw, path, len(groups), index)
    pipeline = parse_pipeline(raw, path, decisions, [i for i, _ in decs], index)
    return Strategy(tuple(decisions), float(bucket_mb), buckets, pipeline), meta


def _parse_buckets(raw: dict, path: str, n_groups: int, index: dict) -> tuple[Bucket, ...]:
    """The explicit buckets of a version-2 plan (structure only; `tag.strategy.plancheck` checks them against the
    decisions)."""
    blist = raw.get("buckets")
    if not isinstance(blist, list):
        raise InputError(path, "buckets", "a list of buckets", short_repr(blist))
    out = []
    for i, b in enumerate(blist):
        if not isinstance(b, dict):
            raise InputError(path, f"buckets[{i}]", "an object with mb, groups and algorithm", short_repr(b))
        mb = b.get("mb")
        if not isinstance(mb, (int, float)) or isinstance(mb, bool) or not math.isfinite(mb) or mb < 0:
            raise InputError(path, f"buckets[{i}].mb", "the bucket's size in MiB (a number >= 0)", short_repr(mb))
        gs = b.get("groups")
        if not (isinstance(gs, list) and gs and all(isinstance(g, int) and not isinstance(g, bool)
                                                    and 0 <= g < n_groups for g in gs)):
            raise InputError(path, f"buckets[{i}].groups", f"a non-empty list of group ids in 0..{n_groups - 1}",
                             short_repr(gs))
        if any(a <= c for a, c in zip(gs, gs[1:])):
            raise InputError(path, f"buckets[{i}].groups", "group ids in reverse backward order (descending)",
                             short_repr(gs))
        alg = b.get("algorithm")
        if alg not in SYNC_METHODS:
            raise InputError(path, f"buckets[{i}].algorithm", "one of " + ", ".join(SYNC_METHODS), short_repr(alg))
        server = b.get("server")
        if alg == "ps":
            if server not in index:
                raise InputError(path, f"buckets[{i}].server", "a device id of the topology for algorithm ps",
                                 short_repr(server))
        elif server is not None:
            raise InputError(path, f"buckets[{i}].server", f"absent or null for algorithm {alg}", short_repr(server))
        out.append(Bucket(tuple(gs), alg, index[server] if alg == "ps" else None))
    return tuple(out)


def _device_order(row_keys: list[list[str]], path: str) -> tuple[str, ...]:
    """A device order in which every row map's keys appear in their written order (ties: first seen)."""
    first_seen: dict[str, int] = {}
    succ: dict[str, set[str]] = {}
    indeg: dict[str, int] = {}
    for keys in row_keys:
        for k in keys:
            if k not in first_seen:
                first_seen[k] = len(first_seen)
                succ[k], indeg[k] = set(), 0
        for a, b in zip(keys, keys[1:]):
            if b not in succ[a]:
                succ[a].add(b)
                indeg[b] += 1
    order: list[str] = []
    ready = sorted((k for k in first_seen if indeg[k] == 0), key=first_seen.get)
    while ready:
        k = ready.pop(0)
        order.append(k)
        for b in succ[k]:
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
        ready.sort(key=first_seen.get)
    if len(order) != len(first_seen):
        raise InputError(path, "decisions", "rows listed in one consistent device (topology) order",
                         "contradictory orders")
    return tuple(order)


def _training(obj: dict, path: str) -> TrainingConfig:
    opt = obj.get("optimizer", "adam")
    if opt not in OPTIMIZERS:
        raise InputError(path, "training.optimizer", "one of " + ", ".join(OPTIMIZERS), short_repr(opt))
    lr = obj.get("lr", 1e-3)
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr) or lr <= 0:
        raise InputError(path, "training.lr", "a positive number", short_repr(lr))
    loss = obj.get("loss", "mse")
    if loss not in PLAN_LOSSES:
        raise InputError(path, "training.loss", "one of " + ", ".join(PLAN_LOSSES), short_repr(loss))
    precision = obj.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise InputError(path, "training.precision", "one of " + ", ".join(PRECISIONS), short_repr(precision))
    return TrainingConfig(optimizer=opt, lr=float(lr), loss=loss, precision=precision)


def _obj(parent: dict, key: str, path: str, where: str | None = None, default=None) -> dict:
    v = parent.get(key, default)
    if not isinstance(v, dict):
        raise InputError(path, where or key, "an object", short_repr(v))
    return v


def _str(parent: dict, key: str, path: str, where: str) -> str:
    v = parent.get(key)
    if not isinstance(v, str):
        raise InputError(path, where, "a string", short_repr(v))
    return v


def _is_pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _pos_int(v, path: str, where: str) -> int:
    if not _is_pos_int(v):
        raise InputError(path, where, "a positive integer", short_repr(v))
    return v

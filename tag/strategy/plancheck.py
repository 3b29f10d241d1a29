"""Check a plan against the model and topology it will be simulated or deployed on.

A mismatch is an InputError naming the plan file, the JSON path (``decisions[3].rows.m1/0``), what
was expected and what was found: never a silent re-plan. The plan's groups are the truth: the
GroupGraph is rebuilt from the op names they list, not re-coarsened.
"""

from __future__ import annotations

from tag.errors import InputError, short_repr
from tag.strategy import Strategy
from tag.strategy.memory_decisions import max_zero
from tag.graph.reader import file_sha256
from tag.strategy.planfile_read import PlanMeta, load_plan_json, parse_plan
from tag.strategy.planfile_pipeline import check_pipeline_graph
from tag.graph.groups import group_has_params
from tag.strategy.regroup import groupgraph_from_plan


def check_plan_hashes(raw: dict, plan_path: str, model_path: str, topology_path: str) -> None:
    """Raise InputError unless the plan's model and topology sha256 match the files given (cheap: no loading)."""
    for key, file in (("model", model_path), ("topology", topology_path)):
        want = raw.get(key, {}).get("sha256") if isinstance(raw.get(key), dict) else None
        have = file_sha256(file)
        if want != have:
            raise InputError(plan_path, f"{key}.sha256", f"the sha256 of {file} ({have[:12]}...)",
                             short_repr(want[:12] + "..." if isinstance(want, str) else want))


def validate_plan(plan, graph, gg, cluster, model_path: str, topology_path: str,
                  plan_path: str | None = None) -> tuple[Strategy, object, PlanMeta]:
    """Check a plan (a path, or a parsed object with `plan_path` for messages) and return
    (Strategy over the cluster's devices, the GroupGraph of the plan's groups, PlanMeta).

    Checks, in order: version; model and topology sha256; batch size vs the loaded graph; device ids;
    row sums; op names of every group (each model op in exactly one group, groups in topological
    order); a shard's split against its group's ops (`_check_shard`); a group that cannot be split by rows on one
    device; sync null exactly for groups without
    parameters or on one device, server only for ps; SFB ops inside their group and owning parameters; buckets;
    a pipeline's cut acyclic over the group graph and no training-mode BatchNormalization with micro-batches
    (`tag.strategy.planfile_pipeline.check_pipeline_graph`).
    `gg` is reused when its partition equals the plan's groups, else the partition is rebuilt.
    """
    if isinstance(plan, dict):
        raw, path = plan, plan_path or "plan.json"
    else:
        raw, path = load_plan_json(plan), str(plan)
    if raw.get("version") not in (1, 2):
        raise InputError(path, "version", "1 or 2", short_repr(raw.get("version")))
    check_plan_hashes(raw, path, model_path, topology_path)
    strategy, meta = parse_plan(raw, path, cluster)
    if meta.batch_size != graph.batch_size:
        raise InputError(path, "model.batch_size", f"the batch the model was loaded with ({graph.batch_size})",
                         str(meta.batch_size))

    rebuilt = groupgraph_from_plan(graph, meta.groups, path)
    if gg is None or [sorted(g.op_ids) for g in gg.groups] != [g.op_ids for g in rebuilt.groups]:
        gg = rebuilt

    for g, dec in enumerate(strategy.decisions):
        where = f"decisions[{_position(raw, g)}]"
        group = gg.groups[g]
        if dec.shard is not None:
            _check_shard(path, where, graph, group.op_ids, dec)
        if strategy.pipeline is not None and dec.zero > max_zero(True):
            raise InputError(path, f"{where}.zero", f"0 or {max_zero(True)} in a pipelined plan (gradients accumulate "
                             "over micro-batches unsharded)", str(dec.zero))
        if not group.splittable and dec.replicated:
            raise InputError(path, f"{where}.rows", f"all rows on one device (group {g} cannot be split by rows)",
                             f"{len(dec.devices)} devices")
        has_params = group_has_params(gg, g)
        if has_params and dec.replicated:
            if dec.sync is None:
                raise InputError(path, f"{where}.sync", "a sync method (ring, tree, hierarchical, leader, ps or auto) "
                                 "for a replicated group with parameters", "null")
        elif dec.sync is not None:
            why = "without parameters" if not has_params else "on one device"
            raise InputError(path, f"{where}.sync", f"null for a group {why}", short_repr(dec.sync))
        names = {graph.ops[i].name: graph.ops[i] for i in group.op_ids}
        for k, op_name in enumerate(dec.sfb):
            op = names.get(op_name)
            if op is None:
                raise InputError(path, f"{where}.sfb[{k}]", f"an op of group {g}", short_repr(op_name))
            if not op.params:
                raise InputError(path, f"{where}.sfb[{k}]", "an op with parameters", short_repr(op_name))
    if strategy.buckets is not None:
        _check_buckets(raw, path, strategy, gg)
    if strategy.pipeline is not None:
        check_pipeline_graph(path, strategy.pipeline, gg)
    return strategy, gg, meta


def _check_buckets(raw: dict, path: str, strategy: Strategy, gg) -> None:
    """A version-2 plan's buckets against its decisions: each syncing group in one bucket of one replica set
    (`tag.sim.buckets.check_buckets`), each bucket's mb its groups' gradient MiB, and a group's explicit sync (not
    auto) its bucket's algorithm (and server)."""
    from tag.sim.buckets import MIB, bucket_syncs, check_buckets

    why = check_buckets(gg, strategy, strategy.buckets)
    if why is not None:
        where, _, what = why.partition(": ")
        raise InputError(path, where, "each syncing group in exactly one bucket of one replica set", what)
    for i, bs in enumerate(bucket_syncs(gg, strategy, strategy.buckets)):
        mb = raw["buckets"][i]["mb"]
        if abs(mb - bs.nbytes / MIB) > 1e-3 + 1e-6 * abs(mb):
            raise InputError(path, f"buckets[{i}].mb", f"{bs.nbytes / MIB:.4f} (its groups' gradient MiB)", str(mb))
        for g in bs.bucket.groups:
            dec = strategy.decisions[g]
            sync = dec.sync or "ring"
            if sync != "auto" and (sync != bs.bucket.algorithm or (sync == "ps" and dec.server != bs.bucket.server)):
                raise InputError(path, f"buckets[{i}].algorithm", f"group {g}'s sync {sync!r} (and its server)",
                                 short_repr(bs.bucket.algorithm))


def _check_shard(path: str, where: str, graph, op_ids, dec) -> None:
    """A decision's shard against its group's ops: `tag.graph.shardable.analyse_group` accepts the split, heads get
    shares that split them exactly (`tag.strategy.shard.exact_units`), and no SFB ops (the simulator does not
    model sufficient factors of a sharded weight)."""
    from tag.graph.shardable import NotShardable, analyse_group
    from tag.strategy.shard import exact_units

    shard = dec.shard
    try:
        lay = analyse_group(graph, op_ids, shard.split)
    except NotShardable as e:
        raise InputError(path, f"{where}.shard.split", "a split the group's ops allow (another split, or no shard)",
                         f"{shard.split!r} ({str(e).split(': ', 1)[-1]})") from None
    for units, exact in zip(lay.units, lay.exact):
        if exact and not exact_units(units, shard.ratios):
            raise InputError(path, f"{where}.shard.ratios", f"shares that split the group's {units} heads into "
                             "whole heads per device", short_repr([round(r, 6) for r in shard.ratios]))
    if dec.sfb:
        raise InputError(path, f"{where}.sfb", "[] for a sharded group (its weight gradients sync by position, "
                         "not as sufficient factors)", short_repr(list(dec.sfb)))


def _position(raw: dict, group: int) -> int:
    """Index in raw['decisions'] of the decision for `group` (for JSON paths in messages)."""
    for i, d in enumerate(raw.get("decisions", [])):
        if isinstance(d, dict) and d.get("group") == group:
            return i
    return group

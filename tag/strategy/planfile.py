"""plan.json (docs/plan.md), writing: the version-2 object of a strategy (`plan_to_json`) and the file (`write_plan`).

Version 2 adds the gradient buckets: ``bucket_mb`` (the cap, MiB) and ``buckets`` (each: its size ``mb`` in MiB,
its ``groups`` in reverse backward order, its ``algorithm`` and, for ps, its ``server``), and for a pipelined plan
``stages``, ``micro_batches``, ``schedule`` and ``k`` (`tag.strategy.planfile_pipeline`).

A plan names devices by id (``m0/1``) and groups by their op names; a `Strategy` names devices by topology index.
Reading, versions 1 and 2, and the structural checks are `tag.strategy.planfile_read`.
"""

from __future__ import annotations

import json
import math
import os

from tag.fileio import write_text_atomic
from tag.graph.reader import file_sha256
from tag.strategy import Strategy, TrainingConfig
from tag.strategy.memory_decisions import memory_to_json
from tag.strategy.planfile_pipeline import pipeline_to_json
from tag.strategy.planfile_shard import shard_to_json

PLAN_VERSION = 2


def predicted_from_result(result, cost_model: str) -> dict:
    """The plan's ``predicted`` object from a SimResult (iteration ms, samples/s, OOM, peak GB per device id)."""
    peak = getattr(result, "peak_memory_gb", {}) or {}
    return {"iteration_ms": _num(result.iteration_ms), "samples_per_s": _num(result.samples_per_s),
            "oom": bool(result.oom), "peak_memory_gb": {d: _num(v) for d, v in peak.items()},
            "cost_model": cost_model}


def baselines_summary(results: dict) -> dict:
    """The plan's ``baselines`` object from ``name -> (Strategy, SimResult)``, names in the given order."""
    return {name: {"iteration_ms": _num(res.iteration_ms), "samples_per_s": _num(res.samples_per_s),
                   "oom": bool(res.oom)} for name, (_, res) in results.items()}


def plan_to_json(strategy: Strategy, gg, cluster, training: TrainingConfig, model_path: str, topology_path: str,
                 *, predicted: dict | None = None, baselines: dict | None = None, search: dict | None = None,
                 model_sha256: str | None = None, topology_sha256: str | None = None, bucket_syncs=None,
                 cost=None, profile: str | None = None, plan_path: str | None = None) -> dict:
    """The plan.json object for `strategy` over the groups of `gg` on `cluster`.

    Rows are listed in topology order, only devices with rows > 0; SFB op names in the group's op
    order; input shapes sorted by name. The batch is the strategy's row sum. `bucket_syncs` are the resolved
    buckets (`tag.sim.context.SimContext.bucket_syncs`); without them the strategy's explicit buckets are used, or
    its buckets are derived, an ``auto`` bucket's algorithm chosen by `cost` (required then). `profile`: the
    `tag profile ops` file the plan was costed with, recorded by path and sha256 (`tag deploy` rebuilds that cost
    model). `plan_path`: where the plan will be written; the model, topology and profile paths are then recorded as
    absolute paths (`recorded_path`; as given without it).
    """
    graph = gg.graph
    if len(strategy.decisions) != gg.n_groups:
        raise ValueError(f"strategy has {len(strategy.decisions)} decisions for {gg.n_groups} groups")
    ids = [d.id for d in cluster.devices]
    batch = sum(strategy.decisions[0].batch_rows) if strategy.decisions else graph.batch_size
    decisions = []
    for g, dec in enumerate(strategy.decisions):
        if len(dec.rows) != len(ids):
            raise ValueError(f"decision {g} has {len(dec.rows)} row counts for {len(ids)} devices")
        op_names = [graph.ops[i].name for i in gg.groups[g].op_ids]
        sfb = set(dec.sfb)
        decisions.append({
            "group": g,
            "rows": {ids[d]: int(r) for d, r in enumerate(dec.rows) if r > 0},
            "sync": dec.sync,
            "server": ids[dec.server] if dec.server is not None else None,
            "sfb": [n for n in op_names if n in sfb] + sorted(sfb - set(op_names)),
            **memory_to_json(dec),
            **shard_to_json(dec.shard, ids),
        })
    plan = {
        "version": PLAN_VERSION,
        "bucket_mb": _num(strategy.bucket_mb),
        "buckets": _buckets_json(strategy, gg, cluster, training, cost, bucket_syncs),
        **pipeline_to_json(strategy.pipeline, ids),
        "model": {"path": recorded_path(model_path, plan_path),
                  "sha256": model_sha256 or file_sha256(model_path),
                  "batch_size": int(batch),
                  "input_shapes": {k: list(v) for k, v in sorted(graph.input_shapes.items())}},
        "topology": {"path": recorded_path(topology_path, plan_path),
                     "sha256": topology_sha256 or file_sha256(topology_path)},
        **({"profile": {"path": recorded_path(profile, plan_path), "sha256": file_sha256(profile)}} if profile else {}),
        "training": training.to_json(),
        "groups": [{"id": g.id, "ops": [graph.ops[i].name for i in g.op_ids]} for g in gg.groups],
        "decisions": decisions,
    }
    if predicted is not None:
        plan["predicted"] = predicted
    if baselines is not None:
        plan["baselines"] = baselines
    if search is not None:
        plan["search"] = search
    return plan


def _buckets_json(strategy: Strategy, gg, cluster, training, cost, bucket_syncs) -> list[dict]:
    from tag.sim.buckets import MIB, bucket_syncs as resolve, derive_buckets

    if bucket_syncs is None:
        if cost is not None and strategy.buckets is None:
            from tag.sim.context import sim_context

            bucket_syncs = sim_context(gg, cluster, cost, training).bucket_syncs(strategy)
        else:
            def no_choice(devices, nbytes):
                raise ValueError("an auto bucket needs the cost model's choice: pass cost or bucket_syncs")
            buckets = strategy.buckets
            if buckets is None:
                buckets = derive_buckets(gg, strategy.decisions, strategy.bucket_mb, no_choice)
            bucket_syncs = resolve(gg, strategy, buckets)
    ids = [d.id for d in cluster.devices]
    out = []
    for bs in bucket_syncs:
        b = bs.bucket
        entry = {"mb": round(bs.nbytes / MIB, 4), "groups": list(b.groups), "algorithm": b.algorithm}
        if b.server is not None:
            entry["server"] = ids[b.server]
        out.append(entry)
    return out


def recorded_path(path: str, plan_path: str | None) -> str:
    """How a plan written to `plan_path` records a file it refers to (model, topology, profile): its absolute path,
    so the plan can be copied anywhere on the machine and read from any working directory (`resolve_recorded` also
    looks beside the plan, for a plan moved together with its inputs); as given when the plan is not written to a
    file (standard output)."""
    return os.path.abspath(path) if plan_path else str(path)


def dumps_plan(plan: dict) -> str:
    """The exact text written for a plan object (2-space indent, key order as built, newline at end)."""
    return json.dumps(plan, indent=2) + "\n"


def write_plan(path: str, plan, *args, **kwargs) -> dict:
    """Write a plan object, or build one with `plan_to_json(plan, *args, **kwargs)`, to `path`; returns it."""
    if not isinstance(plan, dict):
        plan = plan_to_json(plan, *args, **kwargs)
    write_text_atomic(path, dumps_plan(plan))
    return plan


def _num(x) -> float | None:
    x = float(x)
    return round(x, 4) if math.isfinite(x) else None


"""The actions of the structure tree (`tag.search.structure_tree`): whole-plan decisions, each a complete strategy.

A plan's structure is decided top down, one level per tree depth; every action of every level turns the node's
strategy into another complete strategy (or None when it cannot be built), which the simulator scores:

    kind      data | pipeline | placement: the first layout of that kind (`Layouts`)
    layout    (data, placement) one of the kind's layouts
    stages    (pipeline) the stage count S: the DP's best-estimated pipeline of S stages
    micro     (pipeline) the cuts, micro-batch count m and schedule among the DP's pipelines of S stages
    shard     none | every shardable group on one grid | one of the largest groups alone on one grid; the shares
              are the linear program's (`tag.search.shard_search.shard_parts`, solved inside the action)
    memory    keep | ZeRO stage z on every replicated group with parameters | recomputation on every group | the
              memory pass (`tag.search.memory_pass.fit_memory`) when the strategy does not fit
    bucket    keep | each other gradient bucket cap of `tag.search.refine.BUCKET_SIZES_MB`

Layouts (`make_layouts`): data parallelism over every device (the baselines dp-proportional, dp-even, ps and the DP's
dp-balanced and one-stage gradient accumulation), over each machine, each device type and the 2, 4, ... fastest
devices (rows balanced by predicted compute, `tag.search.space.balanced_rows`); pipelines of 2 or more stages
(`tag.search.pipeline_search.pipeline_candidates`); placements (single-device, m-etf, m-topo and the stage
placements of `tag.search.starts.pipeline_starts`). A baseline the memory pass made fit stands in for it. Each list
is in the order the tree widens it (progressive widening), the one a heuristic would try first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from tag.graph.groups import group_has_params
from tag.search.baselines import compute_ms, replicated_strategy
from tag.search.memory_pass import MEMORY_SUFFIX, fit_memory
from tag.search.refine import BUCKET_SIZES_MB
from tag.search.shard_search import candidate_parts, shard_parts
from tag.search.space import balanced_rows, knot_interpolated_ms
from tag.strategy import AUTO, Strategy
from tag.strategy.memory_decisions import max_zero

KINDS = ("data", "pipeline", "placement")
COMMON_LEVELS = ("shard", "memory", "bucket")
KIND_LEVELS = {"data": ("layout",), "pipeline": ("stages", "micro"), "placement": ("layout",)}
MAX_PLACEMENT_STARTS = 8  # stage placements (`pipeline_starts`) offered as placement layouts
PIPELINE_KEEP = 64  # pipelines the DP turns into strategies for the tree (the best by its estimate)
TREE_PASS_SIMULATIONS = 12  # the memory pass as a tree action spends at most this many simulations (the starts' 48)


@dataclass(frozen=True)
class Action:
    """One decision of a level: its name (as plan.json's search.structure.path lists it) and the strategy it
    builds from the node's strategy (None: it does not apply). `build` runs only when the tree widens to it;
    `known` is what it builds when that costs nothing (a layout, a bucket cap), so the tree can have it simulated
    ahead (`tag.search.evaluate.Evaluator.ahead`)."""

    name: str
    build: Callable[[], Strategy | None] = field(compare=False)
    known: Strategy | None = field(default=None, compare=False)


@dataclass
class Layouts:
    """Per kind, (name, strategy) in widening order; `pipelines_by_stages`: S -> the DP's pipelines of S stages
    (best estimate first)."""

    by_kind: dict[str, list[tuple[str, Strategy]]]
    pipelines_by_stages: dict[int, list[tuple[str, Strategy]]]


def subset_layouts(gg, cluster, cost, batch: int) -> list[tuple[str, Strategy]]:
    """Data parallelism over each machine, each device type and the 2, 4, ... fastest devices (whole-model
    compute per row at batch / n rows orders them), fewer than all devices: rows balanced by the devices' predicted
    forward + backward ms of the splittable groups (`balanced_rows`), unsplittable groups on the subset's device
    with the most rows; gradients synced by cost. Named ``dp-<machine>``, ``dp-<type>``, ``dp-fastest<k>``."""
    n = cluster.n_devices
    types = [d.type for d in cluster.devices]
    memo: dict = {}

    def exact(t, r: int) -> float:
        if (t, r) not in memo:
            memo[(t, r)] = compute_ms(gg, cost, t, r)
        return memo[(t, r)]

    def time_ms(d: int, r: int) -> float:
        return knot_interpolated_ms(lambda x: exact(types[d], x), r, batch)

    named: dict[str, tuple[int, ...]] = {}
    for dev in cluster.devices:
        named.setdefault(f"dp-{dev.machine}", ())
        named[f"dp-{dev.machine}"] += (dev.index,)
    for dev in cluster.devices:
        named.setdefault(f"dp-{dev.type.name}", ())
        named[f"dp-{dev.type.name}"] += (dev.index,)
    probe = max(1, batch // n)
    fastest = sorted(range(n), key=lambda d: (time_ms(d, probe), d))
    k = 2
    while k < n:
        named[f"dp-fastest{k}"] = tuple(sorted(fastest[:k]))
        k *= 2
    out, seen = [], set()
    for name, sub in named.items():
        if len(sub) >= n or sub in seen or len(sub) > batch:
            continue
        seen.add(sub)
        rows = balanced_rows(sub, batch, n, time_ms, device_key=lambda d: types[d]) if len(sub) > 1 else \
            tuple(batch if d == sub[0] else 0 for d in range(n))
        if rows is None:
            continue
        host = max(sub, key=lambda d: (rows[d], -d))
        out.append((name, replicated_strategy(gg, rows, AUTO, host=host)))
    return out


def make_layouts(gg, cluster, cost, training, batch: int, baselines: dict, variants: dict,
                 pipelines: list) -> Layouts:
    """The layouts of every kind (module docstring). `baselines`, `variants`: name -> (strategy, SimResult) of the
    baselines and the memory pass's fitted variants; `pipelines`: the DP's `PipelineCandidate`s, best estimate first
    (`pipeline_candidates(..., keep=PIPELINE_KEEP)`; [] offers no pipeline nor micro-batched accumulation)."""
    from tag.search.starts import pipeline_starts

    def own(name: str) -> tuple[str, Strategy] | None:
        if name + MEMORY_SUFFIX in variants:
            return name + MEMORY_SUFFIX, variants[name + MEMORY_SUFFIX][0]
        return (name, baselines[name][0]) if name in baselines else None

    data = [x for x in (own("dp-proportional"), own("dp-even"), own("ps")) if x is not None]
    placement = [x for x in (own("single-device"), own("m-etf"), own("m-topo")) if x is not None]
    by_s: dict[int, list[tuple[str, Strategy]]] = {}
    for c in pipelines:
        s = 1 if c.strategy.pipeline is None else len(c.strategy.pipeline.stages)
        if s == 1:
            data.append((c.name, c.strategy))  # dp-balanced, or one stage with gradient accumulation
        else:
            by_s.setdefault(s, []).append((c.name, c.strategy))
    data += subset_layouts(gg, cluster, cost, batch)
    for i, (name, s) in enumerate(pipeline_starts(gg, cluster, cost, training, batch)):
        if i >= MAX_PLACEMENT_STARTS:
            break
        if not name.startswith("pipeline-1-"):  # one stage is data parallelism, offered above
            placement.append(("stages-" + name[len("pipeline-"):], s))
    by_kind = {k: _unique(v) for k, v in (("data", data), ("placement", placement)) if v}
    if by_s:
        by_kind["pipeline"] = [v[0] for _, v in sorted(by_s.items())]
    ordered = {k: by_kind[k] for k in KINDS if k in by_kind}
    return Layouts(ordered, dict(sorted(by_s.items())))


def _unique(named: list[tuple[str, Strategy]]) -> list[tuple[str, Strategy]]:
    seen, out = set(), []
    for name, s in named:
        if s not in seen:
            seen.add(s)
            out.append((name, s))
    return out


def shard_actions(gg, cluster, cost, training, base: Strategy, shards: dict, result_fn) -> list[Action]:
    """The shard level's actions on `base` (module docstring): every shardable group on one grid per device set
    (grids of k = 2, 4, 8 devices inside a machine, plain and strided, `grids_over`), and each of the
    MAX_TOP_GROUPS groups with the most sliced parameter bytes alone on each grid of its devices (and on one whole
    machine, `machine_grids`, without a pipeline): `tag.search.shard_search.candidate_parts`, the candidates
    `tag plan` simulates before the tree. Each builds its shares by the LP when the tree widens to it."""
    if not shards:
        return []
    return [Action(name, lambda parts=parts: shard_parts(gg, cluster, cost, training, base, parts, shards, result_fn))
            for name, parts in candidate_parts(cluster, base, shards)]


def memory_actions(gg, cluster, cost, training, base: Strategy, result_fn) -> list[Action]:
    """The memory level's actions on `base`: the memory pass (at most TREE_PASS_SIMULATIONS simulations: one action
    should cost about one playout's work) first when `base` does not fit, then ZeRO stage z
    (1 .. the plan kind's `max_zero`) on every replicated group with parameters, and recomputation on every group."""
    def every(edit) -> Strategy | None:
        ds = tuple(edit(g, d) for g, d in enumerate(base.decisions))
        return None if ds == base.decisions else base.with_decisions(ds)

    def fitted() -> Strategy | None:
        fit = fit_memory(gg, cluster, cost, training, base, result_fn, max_simulations=TREE_PASS_SIMULATIONS)
        return fit.strategy if fit.fits else None

    out = [Action("memory-pass", fitted)] if result_fn(base).oom else []
    for z in range(1, max_zero(base.pipeline is not None) + 1):
        out.append(Action(f"zero-{z}", lambda z=z: every(
            lambda g, d: replace(d, zero=z) if d.replicated and group_has_params(gg, g) else d)))
    out.append(Action("recompute", lambda: every(lambda g, d: replace(d, recompute=True))))
    return out


def bucket_actions(base: Strategy) -> list[Action]:
    """The bucket level's actions: each other cap of BUCKET_SIZES_MB (MiB; 0 = one bucket per group)."""
    capped = [Strategy(base.decisions, float(mb), pipeline=base.pipeline)
              for mb in BUCKET_SIZES_MB if float(mb) != base.bucket_mb]
    return [Action(f"bucket-{s.bucket_mb:g}", lambda s=s: s, s) for s in capped]

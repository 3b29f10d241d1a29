"""`plan()`: the search entry point — baselines, pipeline and tensor-shard candidates, MCTS from the best baseline,
refinement, SFB selection.

The caller passes in everything: the coarsened model, the cluster, the cost model, training settings and,
optionally, a `priors_fn` (the GNN; `search` never imports `gnn`). The result carries the chosen strategy,
its simulation, every baseline's simulation and the search's provenance for plan.json.

Budgets count work (`tag.search.budget`): `playouts` tree playouts, `refine_simulations` for refining the tree's
best plan (1/4 of it for each other baseline), a fixed number of starts and SFB subsets; the same inputs,
counts and seed give the same plan under any load. `budget_s` is only a wall-clock safety cap: when it cuts
work short, `PlanResult.capped` is True.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from tag.search.budget import DEFAULT_BUDGET_S, WallCap, default_counts
from tag.search.baselines import best_baseline  # noqa: F401 (tag.gnn.selfplay imports it from here)
from tag.search.evaluate import Evaluator
from tag.search.gc_pause import gc_paused
from tag.search.mcts import MCTS, PriorsFn, VisitRecord
from tag.search.memory_pass import (MEMORY_SUFFIX, best_fitted, decisions_summary, fit_fastest_oom, fit_memory,
                                    with_variants)
from tag.search.multistart import refine_starts
from tag.search.search_start import PIPELINE_MAX_DEVICES, _shard_candidates, search_start  # noqa: F401 (limit: tag plan)
from tag.search.sfb_choice import _apply_sfb
from tag.search.shard_search import SHARD_MAX_DEVICES, group_shards  # noqa: F401 (limit: tag plan)
from tag.search.space import build_space
from tag.strategy import Strategy, TrainingConfig

SFB_MAX_DEVICES = 128  # tag plan skips SFB selection above this many devices (its CP-SAT model grows with them)
# tag plan guides its trees with uniform priors above this many devices: one network forward pass over the device
# graph (every device a node) costs seconds there, more than the few playouts such a search runs
GNN_MAX_DEVICES = 256
# plan() works in one process above this many devices, whatever `workers` says: there the search's process is large and
# the forked workers' copy-on-write faults cost more than they save (benchmarks/plan_time.md part 14: mixed1024 120 s
# in one process, 142 s with a worker)
WORKERS_MAX_DEVICES = 128


@dataclass
class PlanResult:
    strategy: Strategy
    result: object  # SimResult of the strategy
    baselines: dict[str, tuple[Strategy, object]]  # name -> (strategy, SimResult)
    best_baseline: str | None
    method: str
    playouts: int  # tree playouts run
    seconds: float
    seed: int
    simulations: int  # simulations the search ran after the baselines: starts, tree, refinement, SFB subsets
    capped: bool = False  # the wall-clock safety cap cut counted work short
    sfb: dict = field(default_factory=dict)  # SFB report: chosen ops, bytes and ms saved
    records: list[VisitRecord] = field(default_factory=list)
    search_space_size: int = 0
    no_sfb_result: object = None  # SimResult of the searched plan before SFB selection
    start: str = ""  # what the tree search started from: a baseline name or a `tag.search.starts` name
    pipelines: bool = False  # micro-batched pipelines were searched (`tag.search.pipeline_search`)
    candidates: dict = field(default_factory=dict)  # pipeline name -> (strategy, SimResult), each simulated
    shards: bool = False  # tensor shards were searched (`tag.search.shard_search`)
    shard_candidates: dict = field(default_factory=dict)  # shard candidate name -> (strategy, SimResult)
    training: TrainingConfig | None = None  # the training settings searched under (the precision chosen or fixed)
    cost: object = None  # the cost model of that precision
    precision: dict = field(default_factory=dict)  # plan.json search.precision (`tag.search.precision`)
    memory: dict = field(default_factory=dict)  # plan.json search.memory (`memory_report`)
    structure: dict = field(default_factory=dict)  # plan.json search.structure (`tag.search.structure_plan`)


@gc_paused()  # the cyclic collector's passes cost ~1 s of a plan's CPU and free nothing it needs (tag.search.gc_pause)
def plan(gg, cluster, cost, training: TrainingConfig, *, playouts: int | None = None,
         budget_s: float | None = DEFAULT_BUDGET_S, seed: int = 0, priors_fn: PriorsFn | None = None,
         refine: bool = True, sfb: bool = True, refine_simulations: int | None = None,
         on_progress: Callable[[int, float], None] | None = None, pipeline: bool = True,
         cost_for: Callable[[str], object] | None = None, shard: bool = True, structure: bool = True,
         structure_priors_fn=None, workers: int = 0, on_phase: Callable[[str], None] | None = None,
         on_simulation: Callable[[int], None] | None = None) -> PlanResult:
    """Search a strategy: `playouts` tree playouts, then refinement with `refine_simulations` simulations
    (the tree's best plan; refine_simulations // 4 for each other baseline), then SFB selection. None for
    either count: `tag.search.budget.default_counts` of the instance. `budget_s` (None: none) is a wall-clock
    safety cap only; `PlanResult.capped` says whether it bound.

    on_progress(playouts_done, best_iteration_ms) is called after every playout (for a progress bar); on_phase(name)
    when a part of the search begins: "starts" (baselines, pipelines, shard candidates), "tree", "refine", "sfb";
    on_simulation(n) after each simulation the search runs past its seeds, n = the count so far (`simulations` at the
    end), so that a display shows work while no playout ends.
    pipeline: search micro-batched pipelines (`tag.search.pipeline_search`); every candidate is simulated and
    competes with every other plan kind (the result is the best strategy ever simulated); the fastest is refined
    like the other baselines, and is the tree's start when it beats every start and no baseline fits (the tree's
    moves stay inside a pipeline's stages) (False: `tag plan --no-pipeline`; not
    searched above PIPELINE_MAX_DEVICES devices; `PlanResult.pipelines` says whether they were).
    shard: search tensor shards (`tag.search.shard_search`): candidates built on the best baseline, dp-proportional,
    the fastest memory variant and the fastest pipelines (`tag.search.search_start`), and after the tree
    search on its best plan, simulated and competing as the pipelines do (the fastest is refined like the other baselines; refinement also moves single groups into and out
    of a neighbour's shard grid); False: `tag plan --no-shard`; not searched above SHARD_MAX_DEVICES devices
    (`PlanResult.shards` says whether they were).
    cost_for: None searches under `training.precision` with `cost`; else precision -> cost model, and the search
    chooses the precision (`tag.search.precision.choose_precision`; `PlanResult.training` and `.cost` are the chosen).
    Memory (`tag.search.memory_pass`): every baseline that does not fit gets a memory-pass variant (a start like the
    baselines); the pass also runs on the start when nothing fits, on the fastest strategies the tree found that do
    not fit (`fit_fastest_oom`), and on the refined plan if it still does not fit; refinement moves ZeRO stages and
    recomputation per group and per stage.
    workers: processes that simulate ahead of the search on other cores (`tag.search.prefetch`; none above
    WORKERS_MAX_DEVICES devices); the plan, its simulation counts and every figure but the seconds are the same with
    any number.
    """
    t0 = time.monotonic()
    cap = WallCap.after(budget_s)
    default_playouts, default_refine = default_counts(gg.n_groups, cluster.n_devices)
    playouts = default_playouts if playouts is None else playouts
    refine_simulations = default_refine if refine_simulations is None else refine_simulations
    workers = workers if cluster.n_devices <= WORKERS_MAX_DEVICES else 0
    phase = on_phase or (lambda name: None)
    phase("starts")
    st = search_start(gg, cluster, cost, training, cost_for=cost_for, pipeline=pipeline, shard=shard,
                      floors=not sfb, cap=cap, workers=workers, on_simulation=on_simulation)
    try:
        training, cost, baselines, variants, ev = st.training, st.cost, st.baselines, st.variants, st.ev
        base_name, start_name, base = st.base_name, st.start_name, st.base
        candidates, sharded = st.candidates, st.sharded
        pipeline, shard = st.pipeline, st.shard

        def progress(done: int, best_v: float) -> None:
            if on_progress:
                on_progress(done, ev.result(ev.best[1]).iteration_ms if ev.best[1] is not None else math.inf)

        structure_report: dict = {}
        phase("tree")
        if playouts > 0 and structure:  # the structure tree, then per-group polish (tag.search.structure_plan)
            from tag.search.structure_plan import structured_search

            out = structured_search(gg, cluster, cost, training, ev, base, baselines, variants, st.pipelines,
                                    candidates=candidates, sharded=sharded,
                                    playouts=playouts, seed=seed, priors_fn=priors_fn,
                                    structure_priors_fn=structure_priors_fn, refine=refine,
                                    refine_simulations=refine_simulations, shard=shard, cap=cap, on_playout=progress,
                                    on_refine=lambda: phase("refine"))
            best, space = out.best, out.space
            tree_playouts, records = out.tree.playouts, out.polish.records  # the polish's in structure_report
            structure_report = out.report(structure_priors_fn is not None)
            method = "structure+mcts" + ("+gnn" if priors_fn is not None else "") + ("+refine" if refine else "")
        else:
            best, space, res, start_name = _start_search(
                gg, cluster, cost, training, ev, baselines, variants, start_name, base, candidates, sharded,
                playouts=playouts, seed=seed, priors_fn=priors_fn, refine=refine, refine_simulations=refine_simulations,
                shard=shard, cap=cap, progress=progress, on_refine=lambda: phase("refine"), floor=st.floor)
            tree_playouts, records = res.playouts, res.records
            method = ("mcts+gnn" if priors_fn is not None else "mcts") + ("+refine" if refine else "")
        sfb_report: dict = {}
        no_sfb_result = ev.result(best)
        if sfb:
            phase("sfb")
            best, sfb_report = _apply_sfb(gg, cluster, cost, training, best, ev, baselines, ev.result, cap=cap)
            if sfb_report.get("ops"):
                method += "+sfb"
        return PlanResult(strategy=best, result=ev.result(best), baselines=baselines, best_baseline=base_name,
                          method=method, playouts=tree_playouts, seconds=time.monotonic() - t0, seed=seed,
                          simulations=st.counted[0], capped=cap.hit, sfb=sfb_report, records=records,
                          search_space_size=space.size(), no_sfb_result=no_sfb_result, start=start_name,
                          pipelines=pipeline, candidates=candidates, shards=shard, shard_candidates=sharded,
                          training=training, cost=cost,
                          precision=st.precision, memory=memory_report(best, variants),
                          structure=structure_report)
    finally:
        st.prefetcher.close()


def _start_search(gg, cluster, cost, training, ev: Evaluator, baselines: dict, variants: dict, start_name: str,
                  base: Strategy, candidates: dict, sharded: dict, *, playouts: int, seed: int, priors_fn,
                  refine: bool, refine_simulations: int, shard: bool, cap: WallCap, progress, floor,
                  on_refine=None):
    """The search without the structure tree (`--playouts 0`, or `plan(structure=False)`): the per-group tree from
    the best start `base`, then refinement of its best and of every other start (the baselines or their memory
    variants, the fastest pipeline of `candidates`, the fastest shard candidate of `sharded`, which it extends with
    the tree's best as a base, ruled out by `floor` as the starts' were). Returns (best, space, MCTSResult, start
    name)."""
    batch = gg.graph.batch_size
    if ev.result(base).oom:  # nothing fits: the memory pass on the start
        fitted = fit_memory(gg, cluster, cost, training, base, ev.result)
        if fitted.fits:
            start_name, base = start_name + MEMORY_SUFFIX, fitted.strategy
    space = build_space(gg, cluster, cost, batch, base)
    if shard:
        space.shards = group_shards(gg)
    res = MCTS(space, ev, base, seed=seed, priors_fn=priors_fn, lazy_priors=True).run(playouts, cap, progress)
    fit_fastest_oom(gg, cluster, cost, training, ev, cap=cap)
    best = ev.best[1] or base
    if shard and not (cap.reached() or any(d.shard is not None for d in best.decisions)):
        # the tree's best is a base too; refinement still starts from the tree's best, as without shards
        sharded.update(_shard_candidates(gg, cluster, cost, training, ev, {"searched": best}, floor))
    if refine:
        if on_refine:
            on_refine()
        # multi-start (tag.search.multistart): the tree's best first, then every other start, each in its own basin
        named_start = with_variants(baselines, variants).get(start_name, (base,))[0]  # base, or its baseline form
        refine_starts(space, ev, best, baselines=baselines, variants=variants, candidates=candidates,
                      sharded=sharded, skip=(base, named_start), refine_simulations=refine_simulations, cap=cap)
        best = best_fitted(gg, cluster, cost, training, ev, best)
    return best, space, res, start_name


def memory_report(strategy: Strategy, variants: dict) -> dict:
    """plan.json ``search.memory``: the plan's ZeRO stages and recomputed groups (`decisions_summary`) and the
    baselines the memory pass made fit, with their time and decisions."""
    return {**decisions_summary(strategy),
            "variants": {name: {"iteration_ms": round(r.iteration_ms, 4), **decisions_summary(s)}
                         for name, (s, r) in variants.items()}}

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

from tag.search.budget import DEFAULT_BUDGET_S, OTHER_REFINE_SHARE, WallCap, default_counts
from tag.search.evaluate import Evaluator, compute_floor_ms, simulation_key
from tag.search.baselines import best_baseline, least_oom_baseline  # noqa: F401 (re-exported)
from tag.search.memory_pass import fit_fastest_oom
from tag.search.mcts import MCTS, PriorsFn, VisitRecord
from tag.search.memory_pass import MEMORY_SUFFIX, decisions_summary, fit_memory
from tag.search.precision import choose_precision, make_seeds
from tag.search.refine import refine as refine_pass
from tag.search.shard_search import SHARD_MAX_DEVICES, group_shards, shard_candidates
from tag.search.sfb_choice import _apply_sfb
from tag.search.space import build_space, fits_pipeline
from tag.strategy import Strategy, TrainingConfig

MIN_STARTS_WHEN_OOM = 4  # starts simulated even past the safety cap when no baseline fits
SFB_MAX_DEVICES = 128  # tag plan skips SFB selection above this many devices (its CP-SAT model grows with them)
PIPELINE_MAX_DEVICES = 128  # pipelines are not searched above this many devices (the stage model walks every device)
# tag plan guides its trees with uniform priors above this many devices: one network forward pass over the device
# graph (every device a node) costs seconds there, more than the few playouts such a search runs
GNN_MAX_DEVICES = 256
SHARD_PIPELINE_BASES = 2  # the fastest fitting pipelines that shard candidates are also built on


def pick_start(gg, cluster, cost, training, batch: int, ev: Evaluator, baselines: dict, start_name: str, *,
               cap: WallCap | None = None, extra: dict | None = None) -> tuple[str, Strategy]:
    """The strategy the tree search starts from: the best baseline, or a memory-feasible start
    (`tag.search.starts`) that the evaluator values higher. When a baseline fits, only the 1- and 2-stage
    pipelines are tried; when none fits, pipelines in increasing stage count, stopping two stage counts
    after the first that fits (or when the safety `cap` is reached; when no baseline fits, only after
    MIN_STARTS_WHEN_OOM starts), then, if none of them fits, the simulation-fitted tape layout. `extra`: name ->
    (strategy, SimResult) already simulated (the searched pipelines), considered before the stage placements.
    Returns (name, strategy); ties keep the earlier one (the baseline first)."""
    from tag.search.starts import fitted_tape, pipeline_starts

    best_name, best = start_name, baselines[start_name][0]
    best_v = ev.value(best)
    fits = best_baseline(baselines) is not None

    def consider(name: str, s: Strategy) -> bool:
        nonlocal best_name, best, best_v
        v = ev.value(s)
        if v > best_v:
            best_name, best, best_v = name, s, v
        return not ev.result(s).oom

    for name, (s, _) in (extra or {}).items():
        consider(name, s)
    fits = fits or any(not r.oom for _, r in (extra or {}).values())
    stop_after = None
    tried = 0
    for name, s in pipeline_starts(gg, cluster, cost, training, batch, max_stages=2 if fits else 16):
        stages = int(name.split("-")[1])
        if stop_after is not None and stages > stop_after:
            break
        if (fits or tried >= MIN_STARTS_WHEN_OOM) and cap is not None and cap.reached():
            break
        tried += 1
        if consider(name, s) and stop_after is None:
            stop_after = stages + 2
    if not fits and stop_after is None and not (cap is not None and cap.reached()):
        # no pipeline fits: a layout fitted to memory by simulation
        tape = fitted_tape(gg, cluster, training, batch, ev.result)
        if tape is not None:
            consider("tape", tape)
    return best_name, best


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


def plan(gg, cluster, cost, training: TrainingConfig, *, playouts: int | None = None,
         budget_s: float | None = DEFAULT_BUDGET_S, seed: int = 0, priors_fn: PriorsFn | None = None,
         refine: bool = True, sfb: bool = True, refine_simulations: int | None = None,
         on_progress: Callable[[int, float], None] | None = None, pipeline: bool = True,
         cost_for: Callable[[str], object] | None = None, shard: bool = True, structure: bool = True,
         structure_priors_fn=None) -> PlanResult:
    """Search a strategy: `playouts` tree playouts, then refinement with `refine_simulations` simulations
    (the tree's best plan; refine_simulations // 4 for each other baseline), then SFB selection. None for
    either count: `tag.search.budget.default_counts` of the instance. `budget_s` (None: none) is a wall-clock
    safety cap only; `PlanResult.capped` says whether it bound.

    on_progress(playouts_done, best_iteration_ms) is called after every playout (for a progress bar).
    pipeline: search micro-batched pipelines (`tag.search.pipeline_search`); every candidate is simulated and
    competes with every other plan kind (the result is the best strategy ever simulated); the fastest is refined
    like the other baselines, and is the tree's start when it beats every start and no baseline fits (the tree's
    moves stay inside a pipeline's stages) (False: `tag plan --no-pipeline`; not
    searched above PIPELINE_MAX_DEVICES devices; `PlanResult.pipelines` says whether they were).
    shard: search tensor shards (`tag.search.shard_search`): candidates built on the best baseline, dp-proportional,
    the fastest memory variant and the fastest pipelines (`_shard_bases`), and after the tree
    search on its best plan, simulated and competing as the pipelines do (the fastest is refined like the other baselines; refinement also moves single groups into and out
    of a neighbour's shard grid); False: `tag plan --no-shard`; not searched above SHARD_MAX_DEVICES devices
    (`PlanResult.shards` says whether they were).
    cost_for: None searches under `training.precision` with `cost`; else precision -> cost model, and the search
    chooses the precision (`tag.search.precision.choose_precision`; `PlanResult.training` and `.cost` are the chosen).
    Memory (`tag.search.memory_pass`): every baseline that does not fit gets a memory-pass variant (a start like the
    baselines); the pass also runs on the start when nothing fits, on the fastest strategies the tree found that do
    not fit (`fit_fastest_oom`), and on the refined plan if it still does not fit; refinement moves ZeRO stages and
    recomputation per group and per stage.
    """
    from tag.sim import simulate

    t0 = time.monotonic()
    cap = WallCap.after(budget_s)
    default_playouts, default_refine = default_counts(gg.n_groups, cluster.n_devices)
    playouts = default_playouts if playouts is None else playouts
    refine_simulations = default_refine if refine_simulations is None else refine_simulations
    batch = gg.graph.batch_size
    usable_gb = {d.id: d.type.usable_memory_bytes / 1e9 for d in cluster.devices}
    if cost_for is not None:  # the search chooses the precision (tag.search.precision)
        choice = choose_precision(gg, cluster, training, cost_for)
        seeds, precision_report, seed_sims = choice.seeds, choice.report, choice.simulations
    else:
        seeds = make_seeds(gg, cluster, cost, training)
        precision_report, seed_sims = {"chosen": training.precision, "by": "fixed"}, 0
    training, cost, baselines, variants = seeds.training, seeds.cost, seeds.baselines, seeds.variants
    base_name = best_baseline(baselines)
    fit_name = best_baseline({**baselines, **variants})  # the fastest start that fits, memory variants included
    if fit_name is not None:
        reference_ms = {**baselines, **variants}[fit_name][1].iteration_ms
    else:
        reference_ms = _compute_only_ms(gg, cluster, cost, batch)
    start_name = base_name if base_name is not None else least_oom_baseline(baselines, usable_gb)
    counted = [seed_sims + seeds.simulations]  # simulations after the baselines

    def simulate_fn(strategy: Strategy):
        if strategy.pipeline is not None and not pipeline_consistent(strategy):
            return broken_pipeline_result(cluster, batch)  # a move left a group's rows outside its stage
        counted[0] += 1
        return simulate(gg, cluster, cost, strategy, training)

    from tag.sim.context import sim_context

    ctx = sim_context(gg, cluster, cost, training)
    # compute floors rule out refinement moves that cannot pay (`Evaluator.can_exceed`); not with SFB, whose extra
    # start is the fastest plan of the evaluator's cache, which would then miss the moves ruled out
    ev = Evaluator(simulate_fn, reference_ms, usable_gb, key_fn=lambda s: simulation_key(gg, ctx, s),
                   floor_fn=None if sfb else (lambda s: compute_floor_ms(gg, cluster, cost, s)))
    for s, r in seeds.cache.items():  # seed the cache and the best-ever with the baselines and memory variants
        ev.add(s, r)
    pipeline = pipeline and cluster.n_devices <= PIPELINE_MAX_DEVICES
    shard = shard and cluster.n_devices <= SHARD_MAX_DEVICES

    def progress(done: int, best_v: float) -> None:
        if on_progress:
            on_progress(done, ev.result(ev.best[1]).iteration_ms if ev.best[1] is not None else math.inf)

    # the starts: the pipelines and shard candidates, each simulated; the tree starts from the best (`pick_start`).
    # The per-group tree's moves keep a pipelined start inside its stages, so it starts from a pipeline only when no
    # baseline fits; otherwise the pipelines compete through the evaluator's best-ever and refinement
    candidates, pipelines = _pipeline_candidates(gg, cluster, cost, training, batch, ev) if pipeline else ({}, [])
    sharded = _shard_candidates(gg, cluster, cost, training, ev,
                                _shard_bases(baselines, variants, candidates, start_name)) if shard else {}
    start_name, base = pick_start(gg, cluster, cost, training, batch, ev, baselines, start_name, cap=cap,
                                  extra={**variants, **({**candidates, **sharded} if fit_name is None else {})})
    structure_report: dict = {}
    if playouts > 0 and structure:  # the structure tree, then per-group polish (tag.search.structure_plan)
        from tag.search.structure_plan import structured_search

        out = structured_search(gg, cluster, cost, training, ev, base, baselines, variants, pipelines,
                                playouts=playouts, seed=seed, priors_fn=priors_fn,
                                structure_priors_fn=structure_priors_fn, refine=refine,
                                refine_simulations=refine_simulations, shard=shard, cap=cap, on_playout=progress)
        best, space = out.best, out.space
        tree_playouts, records = out.tree.playouts, out.polish.records  # the polish's in structure_report
        structure_report = out.report(structure_priors_fn is not None)
        method = "structure+mcts" + ("+gnn" if priors_fn is not None else "") + ("+refine" if refine else "")
    else:
        best, space, res, start_name = _start_search(
            gg, cluster, cost, training, ev, baselines, variants, start_name, base, candidates, sharded,
            playouts=playouts, seed=seed, priors_fn=priors_fn, refine=refine, refine_simulations=refine_simulations,
            shard=shard, cap=cap, progress=progress)
        tree_playouts, records = res.playouts, res.records
        method = ("mcts+gnn" if priors_fn is not None else "mcts") + ("+refine" if refine else "")
    sfb_report: dict = {}
    no_sfb_result = ev.result(best)
    if sfb:
        best, sfb_report = _apply_sfb(gg, cluster, cost, training, best, ev, baselines, ev.result, cap=cap)
        if sfb_report.get("ops"):
            method += "+sfb"
    return PlanResult(strategy=best, result=ev.result(best), baselines=baselines, best_baseline=base_name,
                      method=method, playouts=tree_playouts, seconds=time.monotonic() - t0, seed=seed,
                      simulations=counted[0], capped=cap.hit, sfb=sfb_report, records=records,
                      search_space_size=space.size(), no_sfb_result=no_sfb_result, start=start_name,
                      pipelines=pipeline, candidates=candidates, shards=shard, shard_candidates=sharded,
                      training=training, cost=cost,
                      precision=precision_report, memory=memory_report(best, variants),
                      structure=structure_report)


def _start_search(gg, cluster, cost, training, ev: Evaluator, baselines: dict, variants: dict, start_name: str,
                  base: Strategy, candidates: dict, sharded: dict, *, playouts: int, seed: int, priors_fn,
                  refine: bool, refine_simulations: int, shard: bool, cap: WallCap, progress):
    """The search without the structure tree (`--playouts 0`, or `plan(structure=False)`): the per-group tree from
    the best start `base`, then refinement of its best and of every other start (the baselines or their memory
    variants, the fastest pipeline of `candidates`, the fastest shard candidate of `sharded`, which it extends).
    Returns (best, space, MCTSResult, start name)."""
    batch = gg.graph.batch_size
    if ev.result(base).oom:  # nothing fits: the memory pass on the start
        fitted = fit_memory(gg, cluster, cost, training, base, ev.result)
        if fitted.fits:
            start_name, base = start_name + MEMORY_SUFFIX, fitted.strategy
    space = build_space(gg, cluster, cost, batch, base)
    if shard:
        space.shards = group_shards(gg)
    res = MCTS(space, ev, base, seed=seed, priors_fn=priors_fn).run(playouts, cap, progress)
    fit_fastest_oom(gg, cluster, cost, training, ev, cap=cap)
    best = ev.best[1] or base
    if shard and not (cap.reached() or any(d.shard is not None for d in best.decisions)):
        # the tree's best is a base too; refinement still starts from the tree's best, as without shards
        sharded.update(_shard_candidates(gg, cluster, cost, training, ev, {"searched": best}))
    if refine:
        # multi-start: the tree's best first, then every other baseline (a different basin: e.g. placement
        # when the tree started from data parallelism), each by strict-improvement coordinate descent that
        # stops when a sweep gains less than 0.1%
        refine_pass(space, ev, best, max_simulations=refine_simulations, cap=cap)
        # a baseline that does not fit is refined from its memory variant when it has one
        starts = {name: variants.get(name + MEMORY_SUFFIX, sr) for name, sr in baselines.items()}
        others = sorted((r.iteration_ms, name) for name, (_, r) in starts.items()
                        if name != start_name and starts[name][0] is not base)
        for _, name in others:
            refine_pass(space, ev, starts[name][0], max_simulations=refine_simulations // OTHER_REFINE_SHARE,
                        cap=cap)
        piped = _best_fitting(candidates)
        if piped is not None and piped is not base:  # the fastest pipeline, refined as the other baselines are
            refine_pass(space, ev, piped, max_simulations=refine_simulations // OTHER_REFINE_SHARE, cap=cap)
        split = _best_fitting(sharded)
        if split is not None and split is not base:  # and the fastest shard candidate
            refine_pass(space, ev, split, max_simulations=refine_simulations // OTHER_REFINE_SHARE, cap=cap)
        best = ev.best[1] or best
        if ev.result(best).oom:
            fit_memory(gg, cluster, cost, training, best, ev.result)
            best = ev.best[1] or best
    return best, space, res, start_name


def memory_report(strategy: Strategy, variants: dict) -> dict:
    """plan.json ``search.memory``: the plan's ZeRO stages and recomputed groups (`decisions_summary`) and the
    baselines the memory pass made fit, with their time and decisions."""
    return {**decisions_summary(strategy),
            "variants": {name: {"iteration_ms": round(r.iteration_ms, 4), **decisions_summary(s)}
                         for name, (s, r) in variants.items()}}


def pipeline_consistent(strategy: Strategy) -> bool:
    """True when every group of a pipelined strategy keeps its rows on its stage's devices, in multiples of the
    micro-batch count (`tag.search.space.fits_pipeline`)."""
    pl = strategy.pipeline
    stage_of = pl.stage_of_group()
    return len(stage_of) == len(strategy.decisions) and all(
        fits_pipeline(dec, g, pl) for g, dec in enumerate(strategy.decisions))


def broken_pipeline_result(cluster, batch: int):
    """The result a search move that breaks its pipeline's rules scores instead of a simulation: out of memory
    on every device by its whole usable memory (the lowest value the evaluator gives), so it never wins."""
    from tag.sim.result import SimResult

    peak = {d.id: 2.0 * d.type.usable_memory_bytes / 1e9 for d in cluster.devices}
    return SimResult(iteration_ms=math.inf, samples_per_s=0.0, oom=True, oom_devices=list(peak), peak_memory_gb=peak,
                     busy_ms={}, link_bytes={}, fit_iteration_ms=math.inf, batch_size=batch)


def _best_fitting(named: dict) -> Strategy | None:
    """The fastest strategy of name -> (strategy, SimResult) that fits in memory (ties: the first), or None."""
    fits = [(r.iteration_ms, i, st) for i, (st, r) in enumerate(named.values())
            if not r.oom and math.isfinite(r.iteration_ms)]
    return min(fits, key=lambda x: (x[0], x[1]))[2] if fits else None


def _pipeline_candidates(gg, cluster, cost, training, batch: int, ev: Evaluator) -> tuple[dict, list]:
    """(name -> (strategy, SimResult) of the pipelines the DP proposes as starts, the first KEEP by its estimate
    and the best of each stage count, simulated through the evaluator (so the best of them is the search's best-ever
    when it wins); the PIPELINE_KEEP best it proposes, for the structure tree, best first)."""
    from tag.search.pipeline_search import KEEP, pipeline_candidates
    from tag.search.structure import PIPELINE_KEEP

    found = pipeline_candidates(gg, cluster, cost, training, batch, keep=PIPELINE_KEEP)
    stages = [c.strategy.pipeline and len(c.strategy.pipeline.stages) for c in found]
    starts = [c for i, c in enumerate(found) if i < KEEP or stages[i] not in stages[:i]]
    return {c.name: (c.strategy, ev.result(c.strategy)) for c in starts}, found


def _shard_candidates(gg, cluster, cost, training, ev: Evaluator, bases: dict) -> dict:
    """name -> (strategy, SimResult) of every shard candidate (`tag.search.shard_search.shard_candidates`) built on
    the bases (name -> strategy), simulated through the evaluator."""
    made = shard_candidates(gg, cluster, cost, training, bases, ev.result)
    return {name: (s, ev.result(s)) for name, s in made.items()}


def _shard_bases(baselines: dict, variants: dict, pipelines: dict, start_name: str) -> dict:
    """name -> strategy the first shard candidates are built on: the start baseline (the best that fits, else the
    least overflowing), dp-proportional, the fastest memory variant that fits, the SHARD_PIPELINE_BASES fastest
    pipelines that fit and the fastest of two or more stages that fits, each strategy once. (The tree's best plan is
    a base too, after the tree search.)"""
    bases = {start_name: baselines[start_name][0]}
    if "dp-proportional" in baselines:
        bases.setdefault("dp-proportional", baselines["dp-proportional"][0])
    fit_variant = best_baseline(variants)
    if fit_variant is not None:
        bases[fit_variant] = variants[fit_variant][0]
    piped = sorted((r.iteration_ms, name) for name, (s, r) in pipelines.items()
                   if not r.oom and math.isfinite(r.iteration_ms))
    staged = [(ms, name) for ms, name in piped
              if pipelines[name][0].pipeline is not None and len(pipelines[name][0].pipeline.stages) > 1]
    for _, name in piped[:SHARD_PIPELINE_BASES] + staged[:1]:
        bases[name] = pipelines[name][0]
    unique: dict = {}
    for name, s in bases.items():
        if s not in unique.values():
            unique[name] = s
    return unique


def _compute_only_ms(gg, cluster, cost, batch: int) -> float:
    """Forward + backward of every group on the fastest device, ignoring memory: a fixed value scale
    for when every baseline runs out of memory."""
    best = math.inf
    for dev in cluster.devices:
        t = sum(cost.group_fwd_ms(g.id, dev.type, batch) + cost.group_bwd_ms(g.id, dev.type, batch) for g in gg.groups)
        best = min(best, t)
    return best

"""The search's starts: everything `tag.search.planner.plan` simulates before any tree, and the tree's root.

Under the chosen precision (`tag.search.precision`): its seeds, the baselines, the memory pass's variants and the
micro-batched pipelines the DP proposes (`tag.search.pipeline_search`), then the tensor-shard candidates
(`tag.search.shard_search`) built on the best of them, each simulated through one `Evaluator` (whose best-ever
the search result is), and the root of the trees, `pick_start`. `tag plan` and the structure network's
self-play (`tag.gnn.structure_selfplay`) both start here, so the network trains on the roots `tag plan` searches
from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain

from tag.search.baselines import best_baseline, least_oom_baseline
from tag.search.budget import WallCap
from tag.search.evaluate import Evaluator, compute_floor_ms, link_floor_and_peak, simulation_key
from tag.search.precision import choose_precision, make_seeds
from tag.search.prefetch import Prefetcher, fork_map
from tag.search.sfb_choice import never_sfb_start, sfb_may_start
from tag.search.shard_search import SHARD_MAX_DEVICES, shard_candidates
from tag.search.space import fits_pipeline
from tag.strategy import Strategy, TrainingConfig

MIN_STARTS_WHEN_OOM = 4  # starts simulated even past the safety cap when no baseline fits
PIPELINE_MAX_DEVICES = 128  # pipelines are not searched above this many devices (the stage model walks every device)
SHARD_PIPELINE_BASES = 2  # the fastest fitting pipelines that shard candidates are also built on


@dataclass
class SearchStart:
    """What the search starts from. `baselines`, `variants`, `candidates` (the pipelines simulated as starts),
    `sharded` (the shard candidates): name -> (strategy, SimResult); `pipelines`: the DP's PipelineCandidates for
    the structure tree, best first; `base` is the trees' root, named `start_name`; `base_name` is the fastest
    baseline that fits (None: none fits). `counted[0]` counts the simulations after the baselines, the evaluator's
    included as they run."""

    training: TrainingConfig
    cost: object
    baselines: dict
    variants: dict
    ev: Evaluator
    base_name: str | None
    start_name: str
    base: Strategy
    candidates: dict
    pipelines: list
    sharded: dict
    pipeline: bool  # pipelines were searched
    shard: bool  # shards were searched
    precision: dict  # plan.json search.precision
    counted: list
    prefetcher: Prefetcher | None = None  # the evaluator's workers (`tag.search.prefetch`); the caller closes it
    floor: "StartFloor | None" = None  # the starts' floor (search_start sets it); it rules out shard candidates


def search_start(gg, cluster, cost, training: TrainingConfig, *, cost_for=None, pipeline: bool = True,
                 shard: bool = True, floors: bool = True, cap: WallCap | None = None,
                 workers: int = 0, on_simulation=None) -> SearchStart:
    """The starts and the root (module docstring). cost_for: None searches under `training.precision` with `cost`;
    else precision -> cost model, and the precision is chosen (`choose_precision`). floors: the evaluator rules out
    moves a compute floor proves cannot pay (`Evaluator.can_exceed`); `plan` turns them off with SFB, whose extra
    start is the fastest plan of the evaluator's cache. pipeline / shard: search them (never above
    PIPELINE_MAX_DEVICES / SHARD_MAX_DEVICES devices). workers: processes that simulate ahead of the search
    (`tag.search.prefetch`; the same results and counts with any number), closed by the caller
    (`SearchStart.prefetcher`). on_simulation(n): called after each simulation through the evaluator (here and in
    every later part of the search), n = `counted[0]` then."""
    from tag.sim import simulate
    from tag.sim.context import sim_context

    cap = cap if cap is not None else WallCap.after(None)
    batch = gg.graph.batch_size
    usable_gb = {d.id: d.type.usable_memory_bytes / 1e9 for d in cluster.devices}
    pipeline = pipeline and cluster.n_devices <= PIPELINE_MAX_DEVICES
    shard = shard and cluster.n_devices <= SHARD_MAX_DEVICES
    # the stage DP's pipelines are seeds: starts like the baselines, and part of each precision's score
    if cost_for is not None:
        choice = choose_precision(gg, cluster, training, cost_for, workers=workers, pipelines=pipeline)
        seeds, precision_report, seed_sims = choice.seeds, choice.report, choice.simulations
    else:
        seeds = make_seeds(gg, cluster, cost, training, pipelines=pipeline, workers=workers)
        precision_report, seed_sims = {"chosen": training.precision, "by": "fixed"}, 0
    training, cost, baselines, variants = seeds.training, seeds.cost, seeds.baselines, seeds.variants
    base_name = best_baseline(baselines)
    fit_name = best_baseline({**baselines, **variants})  # the fastest start that fits, memory variants included
    if fit_name is not None:
        reference_ms = {**baselines, **variants}[fit_name][1].iteration_ms
    else:
        reference_ms = _compute_only_ms(gg, cluster, cost, batch)
    start_name = base_name if base_name is not None else least_oom_baseline(baselines, usable_gb)
    counted = [seed_sims + seeds.simulations]

    ahead = Prefetcher(lambda s: simulate(gg, cluster, cost, s, training), workers)

    def simulate_fn(strategy: Strategy):
        if strategy.pipeline is not None and not pipeline_consistent(strategy):
            return broken_pipeline_result(cluster, batch)  # a move left a group's rows outside its stage
        counted[0] += 1
        res = ahead.take(strategy)
        if on_simulation is not None:
            on_simulation(counted[0])
        return res

    ctx = sim_context(gg, cluster, cost, training)
    ev = Evaluator(simulate_fn, reference_ms, usable_gb, key_fn=lambda s: simulation_key(ctx, s),
                   floor_fn=(lambda s: compute_floor_ms(gg, cluster, cost, s)) if floors else None,
                   prefetch=ahead.ahead if ahead.workers else None)
    # seed the cache and the best-ever with the baselines, the memory variants and the pipeline starts. The per-group
    # tree's moves keep a pipelined start inside its stages, so it starts from a pipeline only when no baseline fits;
    # otherwise the pipelines and shard candidates compete through the evaluator's best-ever
    for s, r in chain(seeds.cache.items(), seeds.pipeline_starts.values()):
        ev.add(s, r)
    candidates, pipelines = dict(seeds.pipeline_starts), seeds.pipelines
    floor = StartFloor(ctx, ev, workers)
    sharded = _shard_candidates(gg, cluster, cost, training, ev,
                                _shard_bases(baselines, variants, candidates, start_name), floor) if shard else {}
    start_name, base = pick_start(gg, cluster, cost, training, batch, ev, baselines, start_name, cap=cap,
                                  extra={**variants, **({**candidates, **sharded} if fit_name is None else {})},
                                  floor_fn=floor)
    return SearchStart(training=training, cost=cost, baselines=baselines, variants=variants, ev=ev,
                       base_name=base_name, start_name=start_name, base=base, candidates=candidates,
                       pipelines=pipelines, sharded=sharded, pipeline=pipeline, shard=shard,
                       precision=precision_report, counted=counted, prefetcher=ahead, floor=floor)


@dataclass
class StartFloor:
    """The floor the starts are ruled out by (`pick_start`'s stage placements, `_shard_candidates`): called on a
    strategy, max(`compute_floor_ms`, `link_floor_ms`), or 0 (no floor) while SFB might still start from a plan that
    slow (`never_sfb_start`: its extra starts are the fastest plans of the evaluator's cache, where a strategy ruled
    out never enters). A strategy SFB never starts from (`sfb_may_start`: pipelined or sharded, as every shard
    candidate is) always has its floor: ruling it out removes no SFB start. Each strategy's task graph is built
    once: its floor and the peaks the same build gives (`peak_gb`, what the shard LP reads of a strategy ruled out)
    are kept. `prepare` builds a list of them at once, shared out between this process and `workers` forked ones."""

    ctx: object  # the strategies' `tag.sim.context.SimContext` (model, cluster, cost model)
    ev: Evaluator
    workers: int = 0  # forked processes `prepare` shares the builds with (`tag.search.prefetch.fork_map`)
    _built: dict = field(default_factory=dict)  # strategy -> (floor ms, peak GB per device id)

    def _build(self, s: Strategy) -> tuple[float, dict]:
        ctx = self.ctx
        link_ms, peak_gb = link_floor_and_peak(ctx, s)
        return max(compute_floor_ms(ctx.gg, ctx.cluster, ctx.cost, s), link_ms), peak_gb

    def _of(self, s: Strategy) -> tuple[float, dict]:
        got = self._built.get(s)
        if got is None:
            got = self._built[s] = self._build(s)
        return got

    def prepare(self, strategies) -> None:
        """Build every one of `strategies` not built yet, this process and `workers` forked ones each taking the next
        (`fork_map`): what asking for them one by one builds, the same values (a pure function of the strategy)."""
        todo = list(dict.fromkeys(s for s in strategies if s not in self._built))
        if self.workers > 0 and len(todo) > 1:
            for s, got in zip(todo, fork_map(self._build, todo, self.workers)):
                self._built[s] = got

    def __call__(self, s: Strategy) -> float:
        floor_ms = self._of(s)[0]
        return floor_ms if not sfb_may_start(s) or never_sfb_start(self.ev, floor_ms) else 0.0

    def peak_gb(self, s: Strategy) -> dict:
        return self._of(s)[1]


def pick_start(gg, cluster, cost, training, batch: int, ev: Evaluator, baselines: dict, start_name: str, *,
               cap: WallCap | None = None, extra: dict | None = None,
               floor_fn=None) -> tuple[str, Strategy]:
    """The strategy the tree search starts from: the best baseline, or a memory-feasible start
    (`tag.search.starts`) that the evaluator values higher. When a baseline fits, only the 1- and 2-stage
    pipelines are tried; when none fits, pipelines in increasing stage count, stopping two stage counts
    after the first that fits (or when the safety `cap` is reached; when no baseline fits, only after
    MIN_STARTS_WHEN_OOM starts), then, if none of them fits, the simulation-fitted tape layout. `extra`: name ->
    (strategy, SimResult) already simulated (the searched pipelines), considered before the stage placements.
    `floor_fn`: a lower bound on a strategy's iteration ms; a stage placement whose bound already scores no better
    than the best so far is not simulated (`Evaluator.can_exceed`: it counts as a simulation, so the same start,
    counts and later search follow; a 2-stage placement on 1,024 devices can take minutes to simulate).
    Returns (name, strategy); ties keep the earlier one (the baseline first)."""
    from tag.search.starts import fitted_tape, pipeline_starts

    best_name, best = start_name, baselines[start_name][0]
    best_v = ev.value(best)
    fits = best_baseline(baselines) is not None

    def consider(name: str, s: Strategy) -> bool:
        nonlocal best_name, best, best_v
        if floor_fn is not None and not ev.can_exceed(s, best_v, floor_fn):
            return False  # provably no better; "fits" is read only while nothing fits, when nothing is ruled out
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


def _shard_candidates(gg, cluster, cost, training, ev: Evaluator, bases: dict, floor: StartFloor) -> dict:
    """name -> (strategy, SimResult) of the shard candidates (`tag.search.shard_search.shard_candidates`) built on
    the bases (name -> strategy), simulated through the evaluator. A candidate's even-share strategy or its LP's
    whose `floor` already scores no better than the best so far is not simulated
    (`Evaluator.can_exceed`: it counts as a simulation, as it did when simulated) and such a candidate is left out;
    the LP of an even-share strategy ruled out reads the peaks of its floor's build. (Most shard candidates over a
    large cluster's slow links are ruled out so: a grid's collectives alone outlast the best start.)"""
    def scored(s: Strategy):
        return ev.result(s) if ev.can_exceed(s, ev.best[0], floor) else None

    def ahead(strategies) -> None:  # the ones the best so far does not rule out already
        strategies = list(strategies)
        floor.prepare(strategies)  # every one's floor is read below: built on all cores at once
        ev.ahead([s for s in strategies if ev.floor_can_exceed(floor(s), ev.best[0])])

    made = shard_candidates(gg, cluster, cost, training, bases, scored, ahead, floor.peak_gb)
    ahead(made.values())
    out = {}
    for name, s in made.items():
        res = scored(s)
        if res is not None:
            out[name] = (s, res)
    return out


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


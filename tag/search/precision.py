"""The plan's precision when the user fixes none: score the search's starts under each candidate, search under the best.

Candidates (`auto_precisions`): fp32, and every other precision that every device type supports
(`tag.strategy.memory_decisions.unsupported_reason`) and computes faster than fp32 on every device type (the catalog
records its tensor-core peak: ``tf32_tflops`` for tf32, ``amp_tflops`` above ``peak_tflops`` for fp16 / bf16). A
precision that only changes numerics (bf16 on CPU ranks, fp16 on a GTX 1080 Ti at 1/64 of its fp32 rate) is never
chosen by itself; ``--precision`` still asks for it.

Score of a precision (`Seeds.score`): its fastest start that fits in memory — the baselines, the memory pass's
variants of those that do not fit (`tag.search.memory_pass.memory_variants`) and, when pipelines are searched, the
pipelines the stage DP proposes as starts (`tag.search.pipeline_search.start_candidates`), each simulated under that
precision's cost model — or, when none fits, its least overflow. The pipelines count because a precision changes
them most: under fp16 / bf16 the activations that cross between stages are half the bytes (`tag.sim.precision`),
while the data-parallel baselines' gradient syncs keep their fp32 bytes. Candidates go in `PREFERENCE` order (full
precision first; bf16 before fp16, which needs loss scaling), and a later one replaces the current choice only when
its score is more than `MIN_GAIN` (1%) faster, or it fits where the current choice does not: mixed precision changes
the numerics, so it must pay. Work: (baselines + memory passes + the stage DP and its starts) per candidate, counted
in the plan's simulations; a candidate not chosen runs the pass only on the baselines whose variant could change its
score (`can_score`: below the fastest fitting baseline's compute floor), so the choice and every score are those of
running every pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

from tag.search.evaluate import compute_floor_ms
from tag.search.memory_pass import DEFAULT_PASS_SIMULATIONS, memory_variants
from tag.strategy import TrainingConfig
from tag.strategy.memory_decisions import peak_class, unsupported_reason

PREFERENCE = ("fp32", "tf32", "bf16", "fp16")
MIN_GAIN = 0.01  # a later precision of PREFERENCE must be this much faster to be chosen
_PEAK_KEY = {"tf32": "tf32_tflops", "amp": "amp_tflops"}


def faster_than_fp32(device_type, precision: str) -> bool:
    """True when the catalog gives `device_type` a peak above its fp32 peak at `precision` (fp32: False)."""
    key = _PEAK_KEY.get(peak_class(precision))
    peak = ((getattr(device_type, "extra", None) or {}).get(key) or 0.0) if key else 0.0
    return peak > device_type.peak_tflops


def auto_precisions(cluster) -> list[str]:
    """The precisions the search compares, in PREFERENCE order (module docstring); always starts with fp32."""
    types = list({d.type.name: d.type for d in cluster.devices}.values())
    return ["fp32"] + [p for p in PREFERENCE[1:]
                       if all(unsupported_reason(t, p) is None and faster_than_fp32(t, p) for t in types)]


@dataclass
class Seeds:
    """The starts of a search under one precision: the baselines and the memory pass's variants (name ->
    (strategy, SimResult)), the cost model and training they were simulated with, and the simulations the variants
    took (the baselines' are not counted, as `tag.search.planner.plan` counts them)."""

    training: TrainingConfig
    cost: object
    baselines: dict
    variants: dict
    simulations: int = 0
    cache: dict = field(default_factory=dict)  # strategy -> SimResult of every simulation made
    complete: bool = True  # the memory pass ran on every baseline that does not fit (`make_seeds`)
    simulate_fn: Callable | None = None
    pipelines: list = field(default_factory=list)  # the stage DP's PipelineCandidates, best first ([]: not searched)
    pipeline_starts: dict = field(default_factory=dict)  # name -> (strategy, SimResult): those simulated as starts

    def held(self) -> int:
        """The simulations these seeds hold: baselines, memory passes and pipeline starts (what a candidate not chosen
        cost the plan)."""
        return len(self.cache) + len(self.pipeline_starts)

    def score(self, usable_gb: dict) -> tuple[int, float]:
        """(0, fastest fitting start ms) or (1, least worst-device peak / usable memory) when none fits."""
        starts = list(self.baselines.values()) + list(self.variants.values()) + list(self.pipeline_starts.values())
        fits = [r.iteration_ms for _, r in starts if not r.oom and math.isfinite(r.iteration_ms)]
        if fits:
            return 0, min(fits)
        return 1, min(max((gb / usable_gb[d] for d, gb in r.peak_memory_gb.items() if usable_gb.get(d)),
                          default=math.inf) for _, r in starts)


def make_seeds(gg, cluster, cost, training, *, pass_simulations: int = DEFAULT_PASS_SIMULATIONS,
               simulate_fn: Callable | None = None, scoring_only: bool = False, pipelines: bool = False,
               workers: int = 0) -> Seeds:
    """Run the baselines under (cost, training), then the memory pass on each that does not fit, then (pipelines)
    the stage DP and its starts (`pipeline_seeds`). `simulate_fn(strategy)`: the simulator call to use (default
    `tag.sim.simulate` on these inputs). scoring_only: run the pass only on the baselines whose variant could change
    `Seeds.score` (`can_score`; a pipeline start only lowers the score, so that set still holds every variant that
    could); the seeds are then `complete` only when that was every baseline that does not fit (`complete_seeds`
    runs the rest). workers: forked processes for the DP and the starts' simulations (the same seeds with any
    number)."""
    from tag.search.baselines import run_baselines

    baselines = run_baselines(gg, cluster, cost, training)
    seeds = Seeds(training, cost, baselines, {}, 0, {s: r for s, r in baselines.values()})
    seeds.simulate_fn = simulate_fn or _simulator(gg, cluster, cost, training)
    named = can_score(gg, cluster, cost, baselines) if scoring_only else baselines
    seeds.complete = all(not r.oom or name in named for name, (_, r) in baselines.items())
    seeds.variants = _variants(gg, cluster, seeds, named, pass_simulations)
    if pipelines:
        pipeline_seeds(gg, cluster, seeds, workers)
    return seeds


def pipeline_seeds(gg, cluster, seeds: Seeds, workers: int = 0) -> None:
    """Fill `seeds.pipelines` with the stage DP's PIPELINE_KEEP best pipelines under the seeds' precision
    (`tag.search.pipeline_search.pipeline_candidates`, for the structure tree) and `seeds.pipeline_starts` with those
    the search simulates as starts (`start_candidates`), simulated here and counted in `seeds.simulations`."""
    from tag.search.pipeline_search import pipeline_candidates, start_candidates
    from tag.search.prefetch import fork_map
    from tag.search.structure import PIPELINE_KEEP

    seeds.pipelines = pipeline_candidates(gg, cluster, seeds.cost, seeds.training, gg.graph.batch_size,
                                          keep=PIPELINE_KEEP, workers=workers)
    starts = start_candidates(seeds.pipelines)
    results = fork_map(seeds.simulate_fn, [c.strategy for c in starts], workers)
    seeds.simulations += len(starts)
    seeds.pipeline_starts = {c.name: (c.strategy, r) for c, r in zip(starts, results)}


def complete_seeds(gg, cluster, seeds: Seeds, *, pass_simulations: int = DEFAULT_PASS_SIMULATIONS) -> Seeds:
    """`seeds` with the memory pass run on every baseline that does not fit (those run before answer from its
    cache): what `make_seeds` without scoring_only gives, simulation for simulation."""
    if not seeds.complete:
        seeds.variants = _variants(gg, cluster, seeds, seeds.baselines, pass_simulations)
        seeds.complete = True
    return seeds


def _variants(gg, cluster, seeds: Seeds, named: dict, pass_simulations: int) -> dict:
    """`memory_variants` of `named` through the seeds' cache (new simulations counted in `seeds.simulations`)."""
    def result(s):
        r = seeds.cache.get(s)
        if r is None:
            seeds.simulations += 1
            r = seeds.cache[s] = seeds.simulate_fn(s)
        return r

    return memory_variants(gg, cluster, seeds.cost, seeds.training, named, result, max_simulations=pass_simulations)


def can_score(gg, cluster, cost, baselines: dict) -> dict:
    """The baselines (name -> (strategy, SimResult)) that do not fit and whose memory-pass variant could change
    `Seeds.score`: all of them when none fits, else those whose `compute_floor_ms` is below the fastest fitting
    baseline's time (a variant can only be slower than its floor; the score is the fastest fitting start)."""
    fits = [r.iteration_ms for _, r in baselines.values() if not r.oom and math.isfinite(r.iteration_ms)]
    if not fits:
        return {name: sr for name, sr in baselines.items() if sr[1].oom}
    best = min(fits)  # > 0; a strategy the floor does not hold for has floor 0 (`compute_floor_ms`) and stays
    return {name: (s, r) for name, (s, r) in baselines.items()
            if r.oom and compute_floor_ms(gg, cluster, cost, s) < best}


@dataclass
class PrecisionChoice:
    """The chosen precision's seeds and the report plan.json's ``search.precision`` carries."""

    seeds: Seeds
    report: dict
    simulations: int  # simulations of the candidates not chosen (their baselines and passes)


def choose_precision(gg, cluster, training, cost_for: Callable[[str], object], *,
                     pass_simulations: int = DEFAULT_PASS_SIMULATIONS, workers: int = 0,
                     pipelines: bool = False) -> PrecisionChoice:
    """Score every candidate of `auto_precisions` (module docstring) and keep the best; `cost_for(precision)` builds
    the cost model of a precision (the CLI's, with its profile); pipelines: the pipelines the stage DP proposes are
    starts too (`make_seeds`). The candidates' seeds are made by this process and `workers` forked ones
    (`tag.search.prefetch.fork_map`): the same seeds with any number."""
    from tag.search.prefetch import fork_map

    usable_gb = {d.id: d.type.usable_memory_bytes / 1e9 for d in cluster.devices}
    chosen, tried, sims = None, {}, 0

    precisions = auto_precisions(cluster)
    costs = {p: cost_for(p) for p in precisions}

    inner = workers if len(precisions) == 1 else 0  # one candidate: its own DP and starts take the workers

    def seeds_of(p: str) -> dict:  # what a forked process sends back: no cost model, no simulate_fn
        made = make_seeds(gg, cluster, costs[p], replace(training, precision=p),
                          pass_simulations=pass_simulations, scoring_only=True, pipelines=pipelines, workers=inner)
        return {k: getattr(made, k) for k in ("baselines", "variants", "simulations", "cache", "complete",
                                              "pipelines", "pipeline_starts")}

    for p, made in zip(precisions, fork_map(seeds_of, precisions, workers)):
        tr, cost = replace(training, precision=p), costs[p]
        seeds = Seeds(tr, cost, **made, simulate_fn=_simulator(gg, cluster, cost, tr))
        score = seeds.score(usable_gb)
        tried[p] = {"fits": score[0] == 0, "best_start_ms": round(score[1], 4) if score[0] == 0 else None}
        if chosen is None or _better(score, chosen[1]):
            if chosen is not None:
                sims += chosen[0].held()
            chosen = (seeds, score)
        else:
            sims += seeds.held()
    seeds = complete_seeds(gg, cluster, chosen[0], pass_simulations=pass_simulations)
    p = seeds.training.precision
    why = ("the only candidate" if len(tried) == 1 else
           f"its best start is the fastest that fits (a precision later in {', '.join(PREFERENCE)} must be over "
           f"{MIN_GAIN:.0%} faster to be chosen)" if tried[p]["fits"] else "nothing fits; it overflows least")
    report = {"chosen": p, "by": "search", "candidates": tried, "why": why}
    return PrecisionChoice(seeds, report, sims)


def _simulator(gg, cluster, cost, training) -> Callable:
    """strategy -> `tag.sim.simulate` of it on these inputs: the seeds' default simulator call."""
    from tag.sim import simulate

    return lambda s: simulate(gg, cluster, cost, s, training)


def _better(score: tuple[int, float], best: tuple[int, float]) -> bool:
    """A later candidate's score beats the current best's: fits where it does not, or more than MIN_GAIN faster."""
    if score[0] != best[0]:
        return score[0] < best[0]
    return score[1] < best[1] * (1 - MIN_GAIN)

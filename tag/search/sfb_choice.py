"""SFB selection on the searched plan and a few other strategies the search simulated (`tag.search.planner`)."""

from __future__ import annotations

import math

from tag.search.budget import WallCap
from tag.strategy import Strategy

# strategies SFB selection runs on besides the searched plan and the best baseline (2 before the structure tree, 1
# until benchmarks/plan_time.md § "SFB's extra start": each run is one CP-SAT model and up to 64 scoring simulations,
# ~1 s on a GPT-2 medium, and on the 9 datasets cases the extra start, a ZeRO / recomputation twin of the searched
# plan, never beat it; 19 further cases gave the same plans without it)
SFB_EXTRA_STARTS = 0
SFB_SOLVE_LIMIT_S = 600.0  # the CP-SAT solver's time limit without a cap (its solves take milliseconds)


def _apply_sfb(gg, cluster, cost, training, best, ev, baselines, simulate_fn, extra_starts: int = SFB_EXTRA_STARTS,
               cap: WallCap | None = None):
    """Run SFB selection on the searched plan, the best baseline and the next `extra_starts` fastest
    strategies the search simulated, and keep the fastest result; the searched plan without SFB wins ties,
    so SFB never makes the plan slower. After the searched plan, further starts are skipped only when the
    safety `cap` is reached. `simulate_fn`: the scoring call, `tag.search.planner.plan` passes its evaluator's
    cached `ev.result` (a start, and the SFB plan chosen on it, are simulated once). Returns (strategy, SFB report of
    the kept one)."""
    from tag.compression import no_sfb_report, select_sfb

    # deploy sends sufficient factors only without micro-batches and without shards, so pipelined or sharded
    # strategies are not SFB starts
    starts = [best] if sfb_may_start(best) else []
    from tag.search.baselines import best_baseline

    name = best_baseline(baselines)
    if name is not None and baselines[name][0].pipeline is None:
        starts.append(baselines[name][0])
    ranked = sorted((res.iteration_ms, i, s) for i, (s, res) in enumerate(ev.cache.items()) if _ranked_start(s, res))
    for _, _, s in ranked:
        if len(starts) >= 2 + extra_starts:
            break
        if s not in starts:
            starts.append(s)
    chosen = best
    report = {} if sfb_may_start(best) else no_sfb_report(ev.result(best).iteration_ms)
    for start in dict.fromkeys(starts):
        if start is not best and cap is not None and cap.reached():
            break
        # each solve stops on CP-SAT's deterministic work limit (tag.compression.model.WORK_LIMIT); its
        # wall-clock limit is the cap's remaining time, so the clock binds only when the cap does
        s, rep = select_sfb(gg, cluster, cost, training, start, simulate_fn,
                            time_limit_s=cap.remaining_s(SFB_SOLVE_LIMIT_S) if cap is not None else SFB_SOLVE_LIMIT_S,
                            ahead_fn=ev.ahead if ev.looks_ahead else None)
        if cap is not None:
            cap.reached()
        if start is best and not report:
            report = rep  # what SFB found on the searched plan, kept if nothing beats it
        if ev.value(s) > ev.value(chosen):
            chosen, report = s, rep
    return chosen, report


def _ranked_start(strategy: Strategy, res) -> bool:
    """Whether `_apply_sfb` ranks a simulated strategy among the fastest it may start from: it fits, takes a finite
    time, may start SFB (`sfb_may_start`) and has no SFB decision yet."""
    return (not res.oom and math.isfinite(res.iteration_ms) and sfb_may_start(strategy)
            and not any(d.sfb for d in strategy.decisions))


def never_sfb_start(ev, floor_ms: float, extra_starts: int = SFB_EXTRA_STARTS) -> bool:
    """True when `_apply_sfb` can never start from a strategy that takes at least `floor_ms`, whatever the search
    adds to `ev`'s cache later: the cache already holds 2 + `extra_starts` strategies it ranks (`_ranked_start`)
    that take less. Its starts are the searched plan, the best baseline and then the fastest ranked strategies not
    among them, 2 + `extra_starts` in all, so at most that many ranked ones are taken, each faster than the slowest
    of those already there (the cache only grows). A strategy ruled out by a floor (`Evaluator.can_exceed`) is then
    missing from no SFB start."""
    need = 2 + extra_starts
    for s, res in ev.cache.items():
        if res.iteration_ms < floor_ms and _ranked_start(s, res):
            need -= 1
            if need == 0:
                return True
    return False


def sfb_may_start(strategy: Strategy) -> bool:
    """Whether SFB selection may start from `strategy`: no pipeline and no sharded group."""
    return strategy.pipeline is None and all(d.shard is None for d in strategy.decisions)

"""The memory pass: make an out-of-memory strategy fit by ZeRO stages and recomputation, losing as little time as it can.

A strategy that runs out of memory keeps its row maps; the pass only raises ``Decision.zero`` of replicated groups with
parameters and sets ``Decision.recompute`` (docs/plan.md § memory and precision). `fit_memory`, in counted simulations,
deterministic:

1. simulate; a strategy that fits is returned unchanged;
2. ZeRO ladder: raise every replicated group with parameters to ZeRO stage 1, then 2, then 3 (groups already higher
   keep theirs; the groups of a gradient bucket share its stage, so the whole plan moves at once), simulating each
   rung, until one fits;
3. recomputation: on the last rung, the `RecomputeMove`s ranked by saved bytes freed on the out-of-memory devices per
   ms of forward added (highest first, ties in group order). A recomputed group frees its saved activations
   A_d = (saved_bytes_per_row x rows_d + saved_bytes_fixed) x (the precision's activation bytes / 4) on each device d
   and adds its forward on its slowest replica. The shortest prefix whose estimates cover every device's excess over
   its usable memory is applied and simulated, and again with the moves left until it fits; a prefix that does not
   lower the simulated excess is not applied and the next step tries its first move alone, and a single move that
   does not lower it is skipped (a re-run forward's activations can raise the backward's peak);
4. lower rungs with recomputation: when the ladder stopped at stage z > 0, every group recomputed at each stage below
   z (0, then 1, ...: the input's stages raised to it), each kept when it fits and the strategy so far does not or is
   slower. ZeRO 2-3 move every gradient or weight once more per pass, which on many replicas or slow links can cost
   more than re-running the forward; the polish below seldom walks there, since lowering a stage without
   recomputation on runs out of memory;
5. trim: turn recomputation off again, the group with the most forward time first, keeping it off when the strategy
   still fits and is faster;
6. polish: try one ZeRO stage, or recomputation on or off, for every group of a stage at once
   (`stage_memory_neighbours`), then each group's ZeRO stage one down and one up and its recomputation toggled
   (`memory_neighbours`), keeping a change that fits and is faster, in sweeps until a sweep changes nothing or the
   budget is spent (a lower stage moves fewer bytes; a higher one can be faster, as a replica updates only its shard).

The estimates only order the moves: the simulator decides whether a strategy fits and how fast it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from tag.graph.groups import group_has_params
from tag.strategy import Decision, Strategy
from tag.strategy.memory_decisions import compute_bytes, max_zero

if TYPE_CHECKING:
    from tag.search.budget import WallCap
    from tag.search.evaluate import Evaluator

FP32_BYTES = 4
DEFAULT_PASS_SIMULATIONS = 48  # simulations one pass may spend (fitting, trimming and polishing)


@dataclass(frozen=True)
class RecomputeMove:
    """Recomputation of group `group`: freed_bytes per device (topology order, estimated), added_ms (its forward on
    its slowest replica)."""

    group: int
    freed_bytes: tuple[float, ...]
    added_ms: float


@dataclass
class MemoryFit:
    """What `fit_memory` did: the strategy it returns (the input when that fits or nothing helps), its SimResult,
    whether it fits, and the simulations spent."""

    strategy: Strategy
    result: object
    fits: bool
    simulations: int = 0


def decisions_summary(strategy: Strategy) -> dict:
    """{"zero": {stage: groups} for stages above 0, "recompute": groups} of a strategy's decisions.

    >>> decisions_summary(Strategy((Decision((1, 1), zero=2), Decision((2, 0), recompute=True))))
    {'zero': {'2': 1}, 'recompute': 1}
    """
    zero: dict[str, int] = {}
    for d in strategy.decisions:
        if d.zero:
            zero[str(d.zero)] = zero.get(str(d.zero), 0) + 1
    return {"zero": dict(sorted(zero.items())), "recompute": sum(1 for d in strategy.decisions if d.recompute)}


def zero_allowed(gg, gid: int, dec: Decision) -> bool:
    """ZeRO applies to a group with parameters and at least two replicas."""
    return dec.replicated and group_has_params(gg, gid)


def recompute_moves(gg, cluster, cost, training, strategy: Strategy) -> list[RecomputeMove]:
    """A `RecomputeMove` for every group that saves activations and is not recomputed yet, in group order."""
    act_scale = compute_bytes(training.precision) / FP32_BYTES
    out = []
    for gid, dec in enumerate(strategy.decisions):
        g = gg.groups[gid]
        if dec.recompute:
            continue
        saved = tuple((g.saved_bytes_per_row * r + g.saved_bytes_fixed) * act_scale if r > 0 else 0.0
                      for r in dec.rows)
        if any(x > 0 for x in saved):
            added = max(cost.group_fwd_ms(gid, cluster.devices[d].type, dec.rows[d]) for d in dec.devices)
            out.append(RecomputeMove(gid, saved, added))
    return out


def rank_moves(moves: list[RecomputeMove], over: dict[int, float]) -> list[RecomputeMove]:
    """Moves that free bytes on a device of `over` (device index -> excess bytes), by bytes freed there (at most the
    excess) per ms added, descending; free moves first; ties in group order."""
    def gain(m: RecomputeMove) -> float:
        return sum(min(m.freed_bytes[d], x) for d, x in over.items())

    useful = [m for m in moves if gain(m) > 0]
    return sorted(useful, key=lambda m: (-(gain(m) / m.added_ms) if m.added_ms > 0 else -math.inf, m.group))


def excess_bytes(result, cluster) -> dict[int, float]:
    """Device index -> bytes its simulated peak exceeds its usable memory by, for the devices that overflow."""
    out = {}
    for d in cluster.devices:
        peak = float(result.peak_memory_gb.get(d.id, 0.0)) * 1e9
        if peak > d.type.usable_memory_bytes:
            out[d.index] = peak - d.type.usable_memory_bytes
    return out


def covering_prefix(ranked: list[RecomputeMove], over: dict[int, float]) -> list[RecomputeMove]:
    """The shortest prefix of `ranked` whose freed bytes cover every device's excess in `over` (all of `ranked` when
    they do not)."""
    left = dict(over)
    chosen = []
    for m in ranked:
        if all(x <= 0 for x in left.values()):
            break
        chosen.append(m)
        for d in left:
            left[d] -= m.freed_bytes[d]
    return chosen


def fit_memory(gg, cluster, cost, training, strategy: Strategy, result_fn: Callable[[Strategy], object], *,
               max_simulations: int = DEFAULT_PASS_SIMULATIONS, ahead_fn=None) -> MemoryFit:
    """Make `strategy` fit (module docstring); `result_fn(strategy) -> SimResult` (the search's cached evaluator).
    Returns the input unchanged when it fits, or when nothing makes it fit within the budget. ahead_fn(strategies):
    told the polish's moves before it tries them (`tag.search.evaluate.Evaluator.ahead`); None: nothing."""
    spent = [0]

    def simulate(s: Strategy):
        spent[0] += 1
        return result_fn(s)

    res = simulate(strategy)
    if not res.oom:
        return MemoryFit(strategy, res, True, simulations=spent[0])
    current, cur_res = strategy, res

    def rung(z: int, recompute: bool = False) -> Strategy:  # every allowed group at stage >= z
        return strategy.with_decisions(replace(d, zero=max(z, d.zero) if zero_allowed(gg, g, d) else d.zero,
                                               recompute=d.recompute or recompute)
                                       for g, d in enumerate(strategy.decisions))
    top = 0
    for z in range(1, max_zero(strategy.pipeline is not None) + 1):  # the ZeRO ladder
        if not cur_res.oom or spent[0] >= max_simulations:
            break
        nxt = rung(z)
        if nxt != current:
            current, cur_res, top = nxt, simulate(nxt), z
    skipped, single = set(), False
    while cur_res.oom and spent[0] < max_simulations:  # recomputation, by bytes per ms of forward
        over = excess_bytes(cur_res, cluster)
        ranked = [m for m in rank_moves(recompute_moves(gg, cluster, cost, training, current), over)
                  if m.group not in skipped]
        step = ranked[:1] if single else covering_prefix(ranked, over)
        if not step:
            break
        nxt = current.with_decisions(replace(d, recompute=True) if any(m.group == g for m in step) else d
                                     for g, d in enumerate(current.decisions))
        nxt_res = simulate(nxt)
        if not nxt_res.oom or sum(excess_bytes(nxt_res, cluster).values()) < sum(over.values()):
            current, cur_res, single = nxt, nxt_res, False
        elif len(step) > 1:
            single = True  # the simulator freed less than estimated: one move at a time
        else:
            skipped.add(step[0].group)  # it frees nothing at the peak
    for z in range(top):  # recomputation everywhere on the rungs below the ladder's last (docstring, step 4)
        if spent[0] >= max_simulations:
            break
        cand = rung(z, recompute=True)
        if cand not in (current, strategy):
            cand_res = simulate(cand)
            if not cand_res.oom and (cur_res.oom or cand_res.iteration_ms < cur_res.iteration_ms):
                current, cur_res = cand, cand_res
    if cur_res.oom:
        return MemoryFit(strategy, res, False, simulations=spent[0])
    has_params = [group_has_params(gg, g) for g in range(len(current.decisions))]

    def better(cand: Strategy) -> bool:
        nonlocal current, cur_res
        r = simulate(cand)
        if not r.oom and r.iteration_ms < cur_res.iteration_ms:
            current, cur_res = cand, r
            return True
        return False

    recomputed = [g for g, d in enumerate(current.decisions) if d.recompute and not strategy.decisions[g].recompute]
    fwd_ms = {m.group: m.added_ms for m in recompute_moves(gg, cluster, cost, training, strategy)}
    for g in sorted(recomputed, key=lambda g: (-fwd_ms.get(g, 0.0), g)):  # trim, the longest forward first
        if spent[0] >= max_simulations:
            break
        better(current.replace(g, replace(current.decisions[g], recompute=False)))

    def group_moves(first: int) -> list[Strategy]:  # the polish's one-group moves from group `first` on
        top = max_zero(current.pipeline is not None)
        return [current.replace(g, dec) for g in range(first, len(current.decisions))
                for dec in memory_neighbours(current.decisions[g], has_params[g], top)]

    improved = True
    while improved and spent[0] < max_simulations:  # polish: a whole stage's, then one group's memory decisions
        improved = False
        stage_moves = stage_memory_neighbours(current, has_params)
        if ahead_fn is not None:
            ahead_fn(stage_moves + group_moves(0))
        for cand in stage_moves:
            if spent[0] >= max_simulations:
                break
            improved = better(cand) or improved
        for g in range(len(current.decisions)):
            for dec in memory_neighbours(current.decisions[g], has_params[g], max_zero(current.pipeline is not None)):
                if spent[0] >= max_simulations:
                    break
                if better(current.replace(g, dec)):
                    improved = True
                    if ahead_fn is not None:
                        ahead_fn(group_moves(g + 1))
    return MemoryFit(current, cur_res, True, spent[0])


def carry_memory(has_params: bool, old: Decision, new: Decision) -> Decision:
    """`new` (a search move's decision for a group) with `old`'s ZeRO stage and recomputation where they still
    apply: the stage when the group has parameters and stays replicated, recomputation always.

    >>> carry_memory(True, Decision((2, 2), zero=2, recompute=True), Decision((4, 0)))
    Decision(rows=(4, 0), sync=None, server=None, sfb=(), zero=0, recompute=True, shard=None)
    """
    zero = old.zero if has_params and new.replicated else 0
    if (new.zero, new.recompute) == (zero, old.recompute):
        return new
    return replace(new, zero=zero, recompute=old.recompute)


def memory_neighbours(dec: Decision, has_params: bool, top: int = 3) -> list[Decision]:
    """Refinement moves of one group's memory decisions: the ZeRO stage one down and one up to `top`
    (`tag.strategy.memory_decisions.max_zero`; a replicated group with parameters), recomputation toggled.

    >>> [(d.zero, d.recompute) for d in memory_neighbours(Decision((2, 2), zero=1), True)]
    [(0, False), (2, False), (1, True)]
    """
    out = []
    if has_params and dec.replicated:
        out += [replace(dec, zero=z) for z in (dec.zero - 1, dec.zero + 1) if 0 <= z <= top]
    out.append(replace(dec, recompute=not dec.recompute))
    return out


def stage_memory_neighbours(strategy: Strategy, has_params) -> list[Strategy]:
    """Strategies that set one ZeRO stage (0-3) on every replicated group with parameters of a pipeline stage, or
    recomputation on or off on all its groups (the whole plan is one stage without a pipeline); only those that
    change something, stages in order, then ZeRO stages ascending, then recomputation off and on."""
    pl = strategy.pipeline
    stages = [list(range(len(strategy.decisions)))] if pl is None else [sorted(st.groups) for st in pl.stages]
    out, seen = [], {strategy}
    for groups in stages:
        edits = [lambda d, g, z=z: replace(d, zero=z) if has_params[g] and d.replicated else d
                 for z in range(max_zero(pl is not None) + 1)]
        edits += [lambda d, g, r=r: replace(d, recompute=r) for r in (False, True)]
        for edit in edits:
            ds = list(strategy.decisions)
            for g in groups:
                ds[g] = edit(ds[g], g)
            cand = strategy.with_decisions(ds)
            if cand not in seen:
                seen.add(cand)
                out.append(cand)
    return out


MEMORY_SUFFIX = "+memory"  # the name of a strategy the memory pass made fit: "dp-even+memory"


def memory_variants(gg, cluster, cost, training, named: dict, result_fn, *,
                    max_simulations: int = DEFAULT_PASS_SIMULATIONS) -> dict:
    """For every out-of-memory strategy of `named` (name -> (strategy, SimResult)), in order, the pass's result when
    it fits: name + MEMORY_SUFFIX -> (strategy, SimResult). `result_fn`: the search's cached simulator call."""
    out = {}
    for name, (s, r) in named.items():
        if not r.oom:
            continue
        fit = fit_memory(gg, cluster, cost, training, s, result_fn, max_simulations=max_simulations)
        if fit.fits:
            out[name + MEMORY_SUFFIX] = (fit.strategy, fit.result)
    return out


OOM_RETRIES = 3  # the fastest out-of-memory strategies the tree found that the memory pass tries to fit


def fit_fastest_oom(gg, cluster, cost, training, ev: Evaluator, *, retries: int = OOM_RETRIES,
                    cap: WallCap | None = None) -> None:
    """The memory pass on the `retries` strategies of the evaluator's cache that do not fit but would beat its best
    fitting one if they did (by `fit_iteration_ms`, fastest first; ties in simulation order); what fits enters the
    evaluator's best-ever through its cache."""
    best = ev.best[1]
    best_ms = ev.result(best).iteration_ms if best is not None else math.inf
    ooms = sorted((r.fit_iteration_ms, i, s) for i, (s, r) in enumerate(list(ev.cache.items()))
                  if r.oom and math.isfinite(r.fit_iteration_ms) and r.fit_iteration_ms < best_ms)
    for _, _, s in ooms[:retries]:
        if cap is not None and cap.reached():
            break
        fit_memory(gg, cluster, cost, training, s, ev.result, ahead_fn=ev.ahead if ev.looks_ahead else None)


def best_fitted(gg, cluster, cost, training, ev: Evaluator, fallback: Strategy) -> Strategy:
    """The evaluator's best-ever (`fallback` when it has none); when that does not fit, the memory pass on it, and
    the best-ever after the pass (the search's last step before SFB)."""
    best = ev.best[1] or fallback
    if ev.result(best).oom:
        fit_memory(gg, cluster, cost, training, best, ev.result, ahead_fn=ev.ahead if ev.looks_ahead else None)
        best = ev.best[1] or best
    return best


def with_variants(baselines: dict, variants: dict) -> dict:
    """name -> (strategy, SimResult) of each baseline, or of its memory-pass variant when it has one: the starts a
    search refines (a baseline that does not fit is refined from the variant the memory pass made of it)."""
    return {name: variants.get(name + MEMORY_SUFFIX, sr) for name, sr in baselines.items()}

"""`select_sfb`: choose the ops of a strategy that send sufficient factors, validated by the simulator.

Steps: clear any SFB lists, find the candidates (`eligible_ops`), simulate the strategy once with a trace
to read the timeline, build the terms (`tag.compression.terms`), and solve the CP-SAT model
(`tag.compression.model`) repeatedly with no-good cuts to list its `pool` best subsets. The simulator
scores each (the model approximates contention between communicators, which the simulator plays out),
then single flips of the best one are tried while they help (`polish_passes`, at most
`max_simulations` subsets scored in all). The result is kept only
if the simulator says it is faster than no SFB at all (never worse); the report says what was saved.
"""

from __future__ import annotations

import math
import time

from tag.compression.eligibility import eligible_ops, with_sfb
from tag.compression.model import solve_sfb_pool
from tag.compression.terms import build_terms
from tag.strategy import Strategy


def _ms(res) -> float:
    return res.iteration_ms if not res.oom and math.isfinite(res.iteration_ms) else math.inf


def _link_total(res) -> float:
    return float(sum(res.link_bytes.values()))


def no_sfb_report(iteration_ms: float, candidates: int = 0) -> dict:
    """The SFB report of a strategy that keeps every all-reduce (no op chosen; `select_sfb` documents the keys)."""
    return {"ops": [], "groups": {}, "candidates": candidates, "bytes_saved": 0.0, "ms_saved": 0.0,
            "iteration_ms_without": iteration_ms, "iteration_ms_with": iteration_ms, "per_group": []}


def select_sfb(gg, cluster, cost, training, strategy: Strategy, simulate_fn=None, *, seed: int = 0,
               time_limit_s: float = 10.0, pool: int = 6, polish_passes: int = 2,
               max_simulations: int = 64, ahead_fn=None) -> tuple[Strategy, dict]:
    """The strategy with SFB lists chosen by the CP-SAT model, and a report dict.

    simulate_fn(strategy) -> SimResult scores strategies (default: `tag.sim.simulate`, uncached). Report
    keys: ops (chosen op names), groups ({group: [op names]}), candidates (count), bytes_saved (link
    bytes per iteration, no SFB minus SFB, from the simulator; may be negative), ms_saved (iteration ms),
    iteration_ms_without / iteration_ms_with, model (status, predicted ms, solve ms, subsets scored),
    per_group (per group: ops, replicas, weight bytes out of the all-reduce, factor bytes gathered).
    ahead_fn(strategies): told the strategies about to be scored, in order (`tag.search.evaluate.Evaluator.ahead`,
    which simulates them on other cores); None: nothing.
    """
    from tag.sim import simulate

    sim = simulate_fn or (lambda s: simulate(gg, cluster, cost, s, training))
    plain = with_sfb(strategy, [])
    cands = eligible_ops(gg, plain)
    t0 = time.monotonic()
    base_res = sim(plain)
    report = no_sfb_report(_ms(base_res), len(cands))
    if not cands or base_res.oom:
        return plain, report
    traced = simulate(gg, cluster, cost, plain, training, trace=True)
    terms = build_terms(gg, cluster, cost, training, plain, cands, traced)

    scored: dict[frozenset, tuple[float, object]] = {frozenset(): (_ms(base_res), base_res)}

    def score(sub: frozenset) -> float:
        if sub not in scored:
            res = sim(with_sfb(plain, [cands[i] for i in sorted(sub)]))
            scored[sub] = (_ms(res), res)
        return scored[sub][0]

    def tell(subsets) -> None:
        if ahead_fn is not None:
            ahead_fn([with_sfb(plain, [cands[i] for i in sorted(sub)]) for sub in subsets if sub not in scored])

    seen: list[list[int]] = []
    first = None
    solutions = []
    for mres in solve_sfb_pool(terms, max(1, min(pool, 2 ** len(cands))), seed=seed, time_limit_s=time_limit_s):
        if not mres.status in ("OPTIMAL", "FEASIBLE"):
            break
        solutions.append(mres)
    tell(frozenset(m.chosen) for m in solutions)
    for mres in solutions:
        first = first or mres
        seen.append(mres.chosen)
        score(frozenset(mres.chosen))
    best = min(scored, key=lambda k: (scored[k][0], sorted(k)))
    for _ in range(polish_passes):
        improved = False
        tell(best ^ {i} for i in range(len(cands)))
        for i in range(len(cands)):
            if len(scored) >= max_simulations:
                break
            nb = best ^ {i}
            if score(nb) < scored[best][0]:
                best, improved = nb, True
                tell(best ^ {j} for j in range(i + 1, len(cands)))
        if not improved:
            break
    report["model"] = {"status": first.status if first else "NONE",
                       "predicted_ms": first.objective_ms if first else math.nan,
                       "predicted_ms_without": first.empty_ms if first else math.nan,
                       "model_choice": [cands[i].op_name for i in (first.chosen if first else [])],
                       "solutions_scored": len(seen), "simulations": len(scored)}
    report["seconds"] = time.monotonic() - t0
    if not best or not scored[best][0] < _ms(base_res):
        return plain, report
    chosen = [cands[i] for i in sorted(best)]
    res = scored[best][1]
    groups: dict[int, list[str]] = {}
    for c in chosen:
        groups.setdefault(c.group, []).append(c.op_name)
    per_group = []
    for g, names in groups.items():
        ts = [terms.cands[i] for i in sorted(best) if cands[i].group == g]
        per_group.append({"group": g, "ops": names, "replicas": len(plain.decisions[g].devices),
                          "weight_bytes": sum(t.weight_bytes for t in ts),
                          "factor_bytes": sum(t.gather_bytes for t in ts)})
    report.update(ops=[c.op_name for c in chosen], groups=groups, per_group=per_group,
                  bytes_saved=_link_total(base_res) - _link_total(res), ms_saved=_ms(base_res) - _ms(res),
                  iteration_ms_with=_ms(res))
    return with_sfb(plain, chosen), report

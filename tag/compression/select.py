"""`select_sfb`: choose the ops of a strategy that send sufficient factors, validated by the simulator.

Steps: clear any SFB lists, find the candidates (`eligible_ops`), simulate the strategy once with a trace
to read the timeline, build the terms (`tag.compression.terms`), solve the CP-SAT model
(`tag.compression.model`), and simulate the chosen subset. The chosen subset is kept only if the
simulator says it is faster than none (never worse); the report says what was saved.
"""

from __future__ import annotations

import math
import time

from tag.compression.eligibility import eligible_ops, with_sfb
from tag.compression.model import solve_sfb_model
from tag.compression.terms import build_terms
from tag.strategy import Strategy


def _ms(res) -> float:
    return res.iteration_ms if not res.oom and math.isfinite(res.iteration_ms) else math.inf


def _link_total(res) -> float:
    return float(sum(res.link_bytes.values()))


def select_sfb(gg, cluster, cost, training, strategy: Strategy, simulate_fn=None, *, seed: int = 0,
               time_limit_s: float = 10.0) -> tuple[Strategy, dict]:
    """The strategy with SFB lists chosen by the CP-SAT model, and a report dict.

    simulate_fn(strategy) -> SimResult scores strategies (default: `tag.sim.simulate`, uncached). Report
    keys: ops (chosen op names), groups ({group: [op names]}), candidates (count), bytes_saved (link
    bytes per iteration, no SFB minus SFB, from the simulator; may be negative), ms_saved (iteration ms),
    iteration_ms_without / iteration_ms_with, model (status, predicted ms, solve ms), per_group (details).
    """
    from tag.sim import simulate

    sim = simulate_fn or (lambda s: simulate(gg, cluster, cost, s, training))
    plain = with_sfb(strategy, [])
    cands = eligible_ops(gg, plain)
    t0 = time.monotonic()
    base_res = sim(plain)
    report = {"ops": [], "groups": {}, "candidates": len(cands), "bytes_saved": 0.0, "ms_saved": 0.0,
              "iteration_ms_without": _ms(base_res), "iteration_ms_with": _ms(base_res), "per_group": []}
    if not cands or base_res.oom:
        return plain, report
    traced = simulate(gg, cluster, cost, plain, training, trace=True)
    terms = build_terms(gg, cluster, cost, training, plain, cands, traced)
    mres = solve_sfb_model(terms, seed=seed, time_limit_s=time_limit_s)
    report["model"] = {"status": mres.status, "predicted_ms": mres.objective_ms, "predicted_ms_without": mres.empty_ms,
                       "solve_ms": mres.solve_ms}
    chosen = [cands[i] for i in mres.chosen]
    if not chosen:
        report["seconds"] = time.monotonic() - t0
        return plain, report
    cand_strategy = with_sfb(plain, chosen)
    res = sim(cand_strategy)
    report["seconds"] = time.monotonic() - t0
    if not _ms(res) < _ms(base_res):
        report["rejected"] = {"ops": [c.op_name for c in chosen], "iteration_ms": _ms(res)}
        return plain, report
    groups: dict[int, list[str]] = {}
    for c in chosen:
        groups.setdefault(c.group, []).append(c.op_name)
    per_group = []
    for g, names in groups.items():
        cs = [(c, terms.cands[i]) for i, c in zip(mres.chosen, chosen) if c.group == g]
        per_group.append({"group": g, "ops": names, "replicas": len(plain.decisions[g].devices),
                          "weight_bytes": sum(t.weight_bytes for _, t in cs),
                          "factor_bytes": sum(t.gather_bytes for _, t in cs)})
    report.update(ops=[c.op_name for c in chosen], groups=groups, per_group=per_group,
                  bytes_saved=_link_total(base_res) - _link_total(res), ms_saved=_ms(base_res) - _ms(res),
                  iteration_ms_with=_ms(res))
    return cand_strategy, report

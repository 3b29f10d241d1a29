"""The suite's results as text: the table of speedups over dp-even, the per-topology summary, the JSON object.

A ratio is dp-even ms / strategy ms (higher is faster; NaN, shown "OOM", when either does not fit). The summary
gives per topology the geometric mean of plan+sfb over dp-even and over dp-proportional across the cases where
both fit, and the median search seconds.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tag.bench.suite import BASELINES, Case

COLUMNS = BASELINES[1:] + ("plan", "plan+sfb", "ideal")


def ratio(case: Case, name: str, over: str = "dp-even") -> float:
    """case.ms[over] / case.ms[name]; NaN when either is missing, infinite (OOM) or the denominator is 0.

    >>> ratio(Case("m", "t", ms={"dp-even": 30.0, "plan": 20.0}), "plan")
    1.5
    """
    a, b = case.ms.get(over, math.inf), case.ms.get(name, math.inf)
    if not math.isfinite(a) or not math.isfinite(b) or b <= 0:
        return math.nan
    return a / b


def geomean(xs) -> float:
    """Geometric mean of the positive numbers among `xs` (NaN if none).

    >>> geomean([1.0, 4.0, float("nan")])
    2.0
    """
    xs = [x for x in xs if x == x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


@dataclass(frozen=True)
class TopologySummary:
    topology: str
    geomean_plan_over_dp_even: float
    geomean_plan_over_dp_proportional: float
    median_search_s: float
    cases: int


def summarise(cases: list[Case]) -> list[TopologySummary]:
    """One TopologySummary per topology, in first-seen order, over the cases without an error."""
    out = []
    for topo in dict.fromkeys(c.topology for c in cases):
        cs = [c for c in cases if c.topology == topo and not c.error]
        out.append(TopologySummary(topo, geomean([ratio(c, "plan+sfb") for c in cs]),
                                   geomean([ratio(c, "plan+sfb", "dp-proportional") for c in cs]),
                                   statistics.median([c.search_s for c in cs]) if cs else math.nan, len(cs)))
    return out


def _fmt(v: float) -> str:
    return "OOM" if v != v else f"{v:.2f}"


def suite_markdown(cases: list[Case]) -> str:
    """The case table (one row per case) and the per-topology summary, as markdown."""
    lines = ["| model | topology | batch | groups | dp-even ms | " + " | ".join(COLUMNS) + " | search s | playouts | simulations |",
             "|" + "---|" * (8 + len(COLUMNS))]
    for c in cases:
        if c.error:
            lines.append(f"| {c.model} | {c.topology} | | | error: {c.error} |" + " |" * len(COLUMNS) + " | | |")
            continue
        de = c.ms.get("dp-even", math.inf)
        if math.isfinite(de):
            cells = [_fmt(ratio(c, n)) for n in COLUMNS]
        else:  # no ratio to show: the strategies that fit, in ms
            cells = [f"{c.ms[n]:.0f} ms" if math.isfinite(c.ms.get(n, math.inf)) else "OOM" for n in COLUMNS]
        lines.append(f"| {c.model} | {c.topology} | {c.batch} | {c.groups} | "
                     f"{'OOM' if not math.isfinite(de) else f'{de:.1f}'} | " + " | ".join(cells)
                     + f" | {c.search_s:.1f}{' (capped)' if c.capped else ''} | {c.playouts} | {c.simulations} |")
    lines += ["", "Ratios are speedups over dp-even (dp-even ms / strategy ms), all simulated in this run with one "
              "cost model; OOM: the strategy does not fit. When dp-even itself is OOM, cells give the iteration ms "
              "of the strategies that fit. ideal: the compute bound 1 / sum_d (1 / T_d), T_d = the cost model's "
              "forward and backward of the whole model at the full batch on device d (no communication, no "
              "memory limit; tag/bench/ideal.py). playouts and simulations: the search's work, which decides the plan "
              "(the same counts and seed give the same plan under any load); (capped): the wall-clock safety cap "
              "cut that case's work short.", "",
              "| topology | geomean plan+sfb / dp-even | geomean plan+sfb / dp-proportional | median search s | cases |",
              "|---|---|---|---|---|"]
    for s in summarise(cases):
        lines.append(f"| {s.topology} | {_fmt(s.geomean_plan_over_dp_even)} | "
                     f"{_fmt(s.geomean_plan_over_dp_proportional)} | {s.median_search_s:.1f} | {s.cases} |")
    return "\n".join(lines + ["", bounds_markdown(cases)])


def bounds_markdown(cases: list[Case]) -> str:
    """Per case: the plan (after SFB) against the compute bound and against 3 x forward FLOPs x batch / summed
    FP32 peaks, in ms and as plan / bound (1.0 = at the bound), and what kind of plan it is."""
    lines = ["| model | topology | plan ms | bound ms | plan / bound | FLOPs bound ms | plan / FLOPs bound | plan kind |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        if c.error:
            continue
        p, b, f = c.ms.get("plan+sfb", math.inf), c.ms.get("ideal", math.nan), c.flops_bound_ms
        def over(x: float) -> str:
            return f"{p / x:.2f}" if math.isfinite(p) and x == x and x > 0 else "OOM" if not math.isfinite(p) else ""
        lines.append(f"| {c.model} | {c.topology} | {p:.1f} | {b:.1f} | {over(b)} | {f:.1f} | {over(f)} | "
                     f"{c.plan_kind or 'one stage'}{'' if c.precision == 'fp32' else ', ' + c.precision} |")
    return "\n".join(lines)


def _num(v: float) -> float | None:
    return v if math.isfinite(v) else None


def suite_json(cases: list[Case]) -> dict:
    """{"cases": [one dict per case, iteration_ms per strategy, null when OOM], "summary": [per topology]}."""
    rows = [{"model": c.model, "topology": c.topology, "batch": c.batch, "groups": c.groups,
             "iteration_ms": {k: _num(v) for k, v in c.ms.items()},
             "speedup_over_dp_even": {k: _num(ratio(c, k)) for k in COLUMNS if k in c.ms},
             "search_seconds": round(c.search_s, 3), "playouts": c.playouts, "simulations": c.simulations,
             "capped": c.capped, "error": c.error, "flops_bound_ms": _num(c.flops_bound_ms),
             "plan_kind": c.plan_kind, "precision": c.precision} for c in cases]
    summary = [{"topology": s.topology, "geomean_plan_over_dp_even": _num(s.geomean_plan_over_dp_even),
                "geomean_plan_over_dp_proportional": _num(s.geomean_plan_over_dp_proportional),
                "median_search_seconds": _num(s.median_search_s), "cases": s.cases} for s in summarise(cases)]
    return {"cases": rows, "summary": summary}

"""The benchmark suite behind `tag bench`: every datasets model x topology, each baseline, the plan, the bound.

Run:  python benchmarks/suite.py [--quick] [--profile F] [--playouts N] [--budget S] [--out FILE.md]
      (or `tag bench [--quick]`)

For each case it runs every baseline and `tag plan`'s search once (the same run gives the plan before and
after SFB selection) and prints, as speedups over dp-even (higher is better): each baseline, the plan without
SFB, the plan with SFB, and the ideal-scaling bound (training FLOPs / sum of device peaks: no communication,
every device at peak). Then per topology: geomean speedup of the plan over dp-even and over dp-proportional,
and the median search seconds.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["vgg19", "resnet50", "resnet101", "inception_v3", "transformer_base", "bert_large", "gpt2_medium", "dlrm"]
TOPOLOGIES = ["heterog8", "tag16", "hap64", "amp16", "modern8"]
QUICK_MODELS = ["vgg19", "resnet50", "gpt2_medium"]
QUICK_TOPOLOGIES = ["heterog8", "tag16", "hap64"]
BASELINES = ["dp-even", "dp-proportional", "ps", "single-device", "m-etf", "m-topo"]


@dataclass
class Case:
    model: str
    topology: str
    batch: int = 0
    groups: int = 0
    ms: dict[str, float] = field(default_factory=dict)  # strategy name -> iteration ms (inf when OOM)
    search_s: float = 0.0
    playouts: int = 0
    error: str | None = None


def ideal_ms(gg, cluster) -> float:
    """Training FLOPs of one iteration (forward + backward at the global batch) / sum of device peaks, ms."""
    b = gg.graph.batch_size
    flops = sum(g.fwd_flops_per_row * b + g.fwd_flops_fixed + g.bwd_flops_per_row * b + g.bwd_flops_fixed
                for g in gg.groups)
    peak = sum(d.type.peak_tflops for d in cluster.devices) * 1e12
    return flops / peak * 1e3


def run_case(model: str, topology: str, *, playouts: int, budget_s: float, profile: str | None, seed: int = 0) -> Case:
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.planner import plan

    case = Case(model, topology)
    mpath = os.path.join(ROOT, "datasets", "models", f"{model}.onnx")
    tpath = os.path.join(ROOT, "datasets", "topologies", f"{topology}.json")
    inp = load_inputs(mpath, tpath, ModelOptions(profile=profile))
    case.batch, case.groups = inp.batch_size, inp.gg.n_groups
    t0 = time.monotonic()
    res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=playouts, budget_s=budget_s, seed=seed, sfb=True)
    case.search_s = time.monotonic() - t0
    case.playouts = res.playouts
    for name, (_, r) in res.baselines.items():
        case.ms[name] = r.iteration_ms if not r.oom else math.inf
    nosfb = res.no_sfb_result
    case.ms["plan"] = nosfb.iteration_ms if not nosfb.oom else math.inf
    case.ms["plan+sfb"] = res.result.iteration_ms if not res.result.oom else math.inf
    case.ms["ideal"] = ideal_ms(inp.gg, inp.cluster)
    return case


def _ratio(case: Case, name: str, over: str = "dp-even") -> float:
    a, b = case.ms.get(over, math.inf), case.ms.get(name, math.inf)
    if not math.isfinite(a) or not math.isfinite(b) or b <= 0:
        return math.nan
    return a / b


def _fmt(v: float) -> str:
    return "OOM" if v != v else f"{v:.2f}"


def markdown(cases: list[Case]) -> str:
    cols = BASELINES[1:] + ["plan", "plan+sfb", "ideal"]
    lines = ["| model | topology | batch | groups | dp-even ms | " + " | ".join(cols) + " | search s |",
             "|" + "---|" * (6 + len(cols))]
    for c in cases:
        if c.error:
            lines.append(f"| {c.model} | {c.topology} | | | error: {c.error} |" + " |" * len(cols) + " |")
            continue
        de = c.ms.get("dp-even", math.inf)
        if math.isfinite(de):
            cells = [_fmt(_ratio(c, n)) for n in cols]
        else:  # no ratio to show: the strategies that fit, in ms
            cells = [f"{c.ms[n]:.0f} ms" if math.isfinite(c.ms.get(n, math.inf)) else "OOM" for n in cols]
        lines.append(f"| {c.model} | {c.topology} | {c.batch} | {c.groups} | "
                     f"{'OOM' if not math.isfinite(de) else f'{de:.1f}'} | " + " | ".join(cells) + f" | {c.search_s:.1f} |")
    lines.append("")
    lines.append("Ratios are speedups over dp-even (dp-even ms / strategy ms); OOM: the strategy does not fit. "
                 "When dp-even itself is OOM, cells give the iteration ms of the strategies that fit.")
    lines.append("")
    lines.append("| topology | geomean plan+sfb / dp-even | geomean plan+sfb / dp-proportional | median search s | cases |")
    lines.append("|---|---|---|---|---|")
    for topo in dict.fromkeys(c.topology for c in cases):
        cs = [c for c in cases if c.topology == topo and not c.error]
        g1 = _geomean([_ratio(c, "plan+sfb") for c in cs])
        g2 = _geomean([_ratio(c, "plan+sfb", "dp-proportional") for c in cs])
        med = statistics.median([c.search_s for c in cs]) if cs else math.nan
        lines.append(f"| {topo} | {_fmt(g1)} | {_fmt(g2)} | {med:.1f} | {len(cs)} |")
    return "\n".join(lines)


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x == x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"{len(QUICK_MODELS)} models x {len(QUICK_TOPOLOGIES)} topologies, small search")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--playouts", type=int, default=None)
    ap.add_argument("--budget", type=float, default=None)
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--topologies", nargs="*", default=None)
    ap.add_argument("--out", default=None, help="also write the markdown table here")
    ap.add_argument("--json", action="store_true", help="one JSON object with one row per case")
    args = ap.parse_args(argv)
    return run(args)


def run(args) -> int:
    import json

    models = args.models or (QUICK_MODELS if args.quick else MODELS)
    topos = args.topologies or (QUICK_TOPOLOGIES if args.quick else TOPOLOGIES)
    playouts = args.playouts or (60 if args.quick else 400)
    budget = args.budget or (8.0 if args.quick else 60.0)
    cases = []
    from tqdm import tqdm

    bar = tqdm(total=len(models) * len(topos), desc="bench", unit="case", file=sys.stderr, disable=None)
    for m in models:
        for t in topos:
            bar.set_postfix_str(f"{m} on {t}")
            try:
                cases.append(run_case(m, t, playouts=playouts, budget_s=budget, profile=args.profile))
            except Exception as e:  # a failing case is reported in its row, the suite goes on
                cases.append(Case(m, t, error=f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"))
            bar.update(1)
    bar.close()
    text = markdown(cases)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if getattr(args, "json", False):
        rows = [{"model": c.model, "topology": c.topology, "batch": c.batch, "groups": c.groups,
                 "iteration_ms": {k: (v if math.isfinite(v) else None) for k, v in c.ms.items()},
                 "search_seconds": round(c.search_s, 3), "playouts": c.playouts, "error": c.error} for c in cases]
        print(json.dumps({"cases": rows}))
    else:
        print(text)
    return 0 if not any(c.error for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())

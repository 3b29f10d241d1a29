"""SFB benchmark: where sufficient-factor broadcasting changes the plan, and by how much.

Run:  python benchmarks/sfb_bench.py [--quick] [--models M ...] [--topologies T ...] [--playouts N] [--budget S]
      [--batch-size B]  (default: each model's default global batch, DESIGN.md § Batch)

For each datasets model x topology: the dp-even baseline with and without SFB (`select_sfb` on it), and
`plan()` (the same search, seed and playouts) before and after its SFB step, with the ops chosen, the
candidates, the link bytes saved and the seconds the SFB selection took. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["vgg19", "fc_wide", "mlp", "dlrm", "transformer_base", "resnet50", "gpt2_medium", "bert_tiny", "gpt2_tiny",
          "bert_large"]
TOPOLOGIES = ["heterog8", "tag16", "hap64", "modern8"]
QUICK_MODELS = ["vgg19", "fc_wide", "dlrm_tiny"]
QUICK_TOPOLOGIES = ["heterog8", "tag16"]


def sfb_case(model: str, topology: str, *, playouts: int, budget_s: float, seed: int = 0,
             batch_size: int | None = None) -> dict:
    """One row: dp-even and plan() iteration ms without / with SFB, ops chosen, bytes saved, SFB seconds."""
    from tag.compression import select_sfb
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.planner import plan
    from tag.sim import simulate

    inp = load_inputs(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"),
                      os.path.join(ROOT, "datasets", "topologies", f"{topology}.json"), ModelOptions(batch_size=batch_size))
    gg, cl, cost, tr = inp.gg, inp.cluster, inp.cost, inp.training
    from tag.search.baselines import run_baselines

    dp = run_baselines(gg, cl, cost, tr)["dp-even"][0]
    t0 = time.monotonic()
    _, dp_rep = select_sfb(gg, cl, cost, tr, dp, lambda s: simulate(gg, cl, cost, s, tr))
    dp_s = time.monotonic() - t0
    res = plan(gg, cl, cost, tr, playouts=playouts, budget_s=budget_s, seed=seed, sfb=True)
    ms = lambda r: r.iteration_ms if not r.oom else math.inf  # noqa: E731
    return {"model": model, "topology": topology, "batch": inp.batch_size,
            "dp_ms": dp_rep["iteration_ms_without"], "dp_sfb_ms": dp_rep["iteration_ms_with"],
            "dp_ops": len(dp_rep["ops"]), "candidates": dp_rep["candidates"], "dp_sfb_s": dp_s,
            "plan_ms": ms(res.no_sfb_result), "plan_sfb_ms": ms(res.result), "plan_ops": len(res.sfb.get("ops", [])),
            "plan_bytes_saved": res.sfb.get("bytes_saved", 0.0) if res.sfb.get("ops") else 0.0,
            "search_s": res.seconds}


def markdown(rows: list[dict]) -> str:
    """The table: per case, ms without -> with SFB for dp-even and the plan, and what SFB chose."""
    out = ["| model | topology | batch | cand. | dp-even ms | +SFB ms | ops | plan ms | +SFB ms | ops | MB saved | SFB s (dp) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['topology']} | error: {r['error']} |")
            continue
        out.append(f"| {r['model']} | {r['topology']} | {r['batch']} | {r['candidates']} | {r['dp_ms']:.2f} | "
                   f"{r['dp_sfb_ms']:.2f} | {r['dp_ops']} | {r['plan_ms']:.2f} | {r['plan_sfb_ms']:.2f} | {r['plan_ops']} | "
                   f"{r['plan_bytes_saved'] / 1e6:.1f} | {r['dp_sfb_s']:.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--topologies", nargs="*", default=None)
    ap.add_argument("--playouts", type=int, default=None)
    ap.add_argument("--budget", type=float, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    a = ap.parse_args(argv)
    models = a.models or (QUICK_MODELS if a.quick else MODELS)
    topos = a.topologies or (QUICK_TOPOLOGIES if a.quick else TOPOLOGIES)
    playouts, budget = a.playouts or (40 if a.quick else 200), a.budget or (10.0 if a.quick else 60.0)
    rows = []
    for m in models:
        for t in topos:
            print(f"{m} on {t} ...", file=sys.stderr, flush=True)
            try:
                rows.append(sfb_case(m, t, playouts=playouts, budget_s=budget, batch_size=a.batch_size))
            except Exception as e:  # a failing case is reported in its row
                rows.append({"model": m, "topology": t, "error": f"{type(e).__name__}: {str(e)[:80]}"})
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Gradient buckets on 2 local cpu ranks: measured `tag deploy` step vs `tag simulate --plan`, one bucket per group
against 25 MiB buckets.

Usage: python benchmarks/buckets_deploy.py [--model resnet_tiny] [--batch-size 32] [--steps 30] [--warmup 5]
       [--rounds 3] [--caps 0,25] [--sync auto] [--work DIR] [--reuse] [--profile-together]

1. `tag profile links --nproc 2` writes the measured 2-rank topology and `tag profile ops` the model's op times
   (as deploy runs them: one thread per rank, rows = batch / 2); with --profile-together two copies of `tag profile
   ops` run at once and the first's figures are used (both cores busy, as when both ranks compute);
2. for each cap, the dp-even plan (every group on both ranks, even rows) with ``bucket_mb`` = cap is written through
   `tag.strategy.planfile.plan_to_json` with its resolved buckets (`SimContext.bucket_syncs`: cap 0 = one bucket
   per group with parameters, 25 = DDP's default cap) and the profile it was costed with;
3. per plan, `tag simulate MODEL TOPO --plan P --profile PROF --json` (the planner's simulator: bucket syncs overlap
   the remaining backward, asynchronous sends) and the same simulation with deploy's blocking exchanges, once with
   syncs after the whole backward (`simulate(..., overlap_sync=False, blocking_sends=True)`) and once overlapped
   (`overlap_sync=True, blocking_sends=True`: what the runtime starts since it overlaps bucket syncs) are the
   predictions;
4. `tag deploy P MODEL --steps N --warmup W --json` gives ``measured_step_ms`` (median step after the warm-up) and
   ``predicted_step_ms`` (the product's own prediction of that step, `tag.cli.deploy.predict_as_run`: the plan's
   recorded profile with its contention terms, the measured barrier, bucket sums overlapping the backward as the
   runtime starts them), `--rounds` times, the plans alternating so both see the same load; the table gives the
   median over rounds of each, and the factor of deploy's speed check in each round (``prediction.speed_check``:
   compute scaled by sqrt(now / then), `tag.profile.speed_check`; "skipped" when deploy declined it).

Prints a markdown table; every figure comes from the commands above, which the table's header repeats.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "datasets", "models")


def _tag(*args, json_out: bool = True) -> dict | None:
    cmd = [sys.executable, "-m", "tag.cli", *args] + (["--json"] if json_out else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"tag {' '.join(args)} failed: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout) if json_out else None


def write_plan(model: str, topo: str, profile: str, batch: int, cap_mb: float, out: str, sync: str = "auto") -> list[dict]:
    """The dp-even plan of `model` on `topo` with a `cap_mb` bucket cap, written to `out`; returns its buckets.
    sync: the replicated groups' sync (dp-even's ``auto``: each bucket's algorithm chosen by cost)."""
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.baselines import dp_even
    from tag.sim import simulate
    from tag.sim.context import sim_context
    from tag.strategy import Strategy
    from tag.strategy.planfile import plan_to_json, predicted_from_result, write_plan as write

    inp = load_inputs(model, topo, ModelOptions(batch_size=batch, profile=profile))
    base = dp_even(inp.gg, inp.cluster, inp.cost, inp.training, batch)
    decisions = tuple(d if d.sync is None else replace(d, sync=sync) for d in base.decisions)
    strategy = Strategy(decisions, cap_mb)
    res = simulate(inp.gg, inp.cluster, inp.cost, strategy, inp.training)
    buckets = sim_context(inp.gg, inp.cluster, inp.cost, inp.training).bucket_syncs(strategy)
    obj = plan_to_json(strategy, inp.gg, inp.cluster, inp.training, model, topo,
                       predicted=predicted_from_result(res, inp.cost.name), bucket_syncs=buckets,
                       profile=profile)
    write(out, obj)
    return obj["buckets"]


def as_deploy_ms(model: str, topo: str, profile: str, plan: str, overlap_sync: bool = False) -> float:
    """The plan simulated with deploy's blocking exchanges, syncs after the whole backward (or overlapped)."""
    from tag.modelio import ModelOptions, load_inputs
    from tag.sim import simulate

    inp = load_inputs(model, topo, ModelOptions(profile=profile), plan_path=plan)
    return simulate(inp.gg, inp.cluster, inp.cost, inp.strategy, inp.training, overlap_sync=overlap_sync,
                    blocking_sends=True).iteration_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet_tiny")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--caps", default="0,25")
    ap.add_argument("--sync", default="auto", help="the groups' sync: auto (dp-even's) or an algorithm")
    ap.add_argument("--work", default="buckets-deploy-work")
    ap.add_argument("--reuse", action="store_true", help="keep the topology and profile already in --work")
    ap.add_argument("--profile-together", action="store_true",
                    help="profile ops with a second copy running at once (both cores busy, as in deploy)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(MODELS, f"{a.model}.onnx")
    topo, prof = os.path.join(a.work, "links2.json"), os.path.join(a.work, f"{a.model}.profile.json")
    t0 = time.time()
    if not (a.reuse and os.path.isfile(topo)):
        _tag("profile", "links", "--nproc", "2", "-o", topo, json_out=False)
    if not (a.reuse and os.path.isfile(prof)):
        ops = ["profile", "ops", model, "--batch-size", str(a.batch_size), "--rows", str(a.batch_size // 2)]
        if a.profile_together:
            twin = [subprocess.Popen([sys.executable, "-m", "tag.cli", *ops, "-o", prof + ".twin.json"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        _tag(*ops, "-o", prof, json_out=False)
        if a.profile_together:
            twin[0].wait()
    caps = [float(c) for c in a.caps.split(",")]
    plans, rows = {}, {}
    for cap in caps:
        plan = os.path.join(a.work, f"{a.model}-{a.sync}-b{cap:g}.json")
        buckets = write_plan(model, topo, prof, a.batch_size, cap, plan, a.sync)
        sim = _tag("simulate", model, topo, "--plan", plan, "--profile", prof)
        plans[cap] = plan
        rows[cap] = {"buckets": len(buckets), "algorithms": sorted({b["algorithm"] for b in buckets}),
                     "sim_ms": sim["iteration_ms"], "sim_deploy_ms": as_deploy_ms(model, topo, prof, plan),
                     "sim_overlap_ms": as_deploy_ms(model, topo, prof, plan, overlap_sync=True),
                     "measured": [], "product": [], "check": []}
    for _ in range(a.rounds):
        for cap in caps:
            out = _tag("deploy", plans[cap], model, "--steps", str(a.steps), "--warmup", str(a.warmup))
            rows[cap]["measured"].append(out["measured_step_ms"])
            rows[cap]["product"].append(out.get("predicted_step_ms"))
            check = (out.get("prediction") or {}).get("speed_check")
            rows[cap]["check"].append(f"x{check['factor']:.2f}" if check else "skipped")
    print(f"`python benchmarks/buckets_deploy.py --model {a.model} --batch-size {a.batch_size} --steps {a.steps} "
          f"--warmup {a.warmup} --rounds {a.rounds} --caps {a.caps} --sync {a.sync}"
          f"{' --profile-together' if a.profile_together else ''}` ({time.time() - t0:.0f} s; load average after "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})\n")
    print("| bucket cap MiB | buckets | algorithms | tag simulate ms | blocking, syncs after backward ms | blocking, "
          "syncs overlapped ms | tag deploy predicted ms | measured ms (median of rounds) | rounds | err vs tag simulate "
          "% | err vs after-backward % | err vs overlapped % | err vs tag deploy predicted % | speed check x sqrt(now / then), "
          "by round) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for cap in caps:
        r = rows[cap]
        m = statistics.median(r["measured"])
        r["product_ms"] = statistics.median(r["product"]) if None not in r["product"] else float("nan")
        errs = " | ".join(f"{100 * (r[k] - m) / m:+.1f}" for k in ("sim_ms", "sim_deploy_ms", "sim_overlap_ms",
                                                                  "product_ms"))
        print(f"| {cap:g} | {r['buckets']} | {', '.join(r['algorithms'])} | {r['sim_ms']:.2f} | "
              f"{r['sim_deploy_ms']:.2f} | {r['sim_overlap_ms']:.2f} | {r['product_ms']:.2f} | {m:.2f} | "
              f"{', '.join(f'{x:.1f}' for x in r['measured'])} | {errs} | {', '.join(r['check'])} |")


if __name__ == "__main__":
    main()

"""Planning time of the `tag plan` process at default settings, against the figures before (issue 24 must-show 4, issue
20 must-show 3).

Run (alone on the machine's cores, as the figures in plan_time.md were taken):

    flock -x /work/cpu.lock python benchmarks/plan_time.py [--no-big] [--only-big] [--no-random]

1. The 9 datasets cases (resnet50, gpt2_medium, bert_large x heterog8, modern8, tag16), as benchmarks/ablate.md
   timed them: `tag plan MODEL TOPO --json -o P.json` (GNN priors, SFB, the search choosing the precision).
2. The random clusters of benchmarks/ablate.md (seeds 1-3, `tag.bench.ablate.random_topology_file`) with resnet50
   and gpt2_medium: the plan's predicted step against ablate.md's `full` column.
3. Unless --no-big: `tag plan datasets/models/resnet50.onnx datasets/topologies/mixed1024.json --batch-size 65536
   --optimizer momentum`, and `tag simulate ... --baseline dp-even` on the same inputs, both as whole processes, with
   the lines the plan prints.

Each row prints the wall and CPU (user + system) seconds of the process, plan()'s own seconds (plan.json search.seconds), the simulations
(search.simulations) and the predicted step (predicted.iteration_ms) beside the previous figures (`BEFORE`), and
whether the step is no worse (within 0.01 ms of the figure before, or faster).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("resnet50", "gpt2_medium", "bert_large")
TOPOLOGIES = ("heterog8", "modern8", "tag16")
# case -> (wall s, simulations, plan ms) before this work: benchmarks/ablate.md § planning time (commit 3e843f7),
# its random-cluster `full` column (commit 8117c07, wall and simulations not recorded) and its 1,024-device paragraph
BEFORE = {
    ("resnet50", "heterog8"): (12.5, 668, 139.27), ("resnet50", "modern8"): (9.0, 727, 41.14),
    ("resnet50", "tag16"): (22.6, 678, 140.93), ("gpt2_medium", "heterog8"): (16.5, 1354, 1346.70),
    ("gpt2_medium", "modern8"): (12.0, 1011, 198.42), ("gpt2_medium", "tag16"): (29.8, 1386, 1656.28),
    ("bert_large", "heterog8"): (18.9, 1055, 1072.58), ("bert_large", "modern8"): (15.6, 968, 176.75),
    ("bert_large", "tag16"): (43.6, 1077, 1394.17),
    ("resnet50", "random-1"): (None, None, 47.85), ("gpt2_medium", "random-1"): (None, None, 269.37),
    ("resnet50", "random-2"): (None, None, 31.65), ("gpt2_medium", "random-2"): (None, None, 135.84),
    ("resnet50", "random-3"): (None, None, 78.47), ("gpt2_medium", "random-3"): (None, None, 702.15),
    ("resnet50", "mixed1024"): (515.0, 361, 54.55),
}
BIG_FLAGS = ["--batch-size", "65536", "--optimizer", "momentum"]
NO_WORSE_MS = 0.01  # plan.json rounds iteration_ms to 4 decimals, ablate.md to 2


def run_tag(args: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run `tag ARGS` as a process in the repository; (wall s, CPU s of the process, the completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tag.cli", *args], capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"tag {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc


def plan_row(model: str, topo_name: str, topo_path: str, flags: list[str], tmp: str) -> dict:
    """Plan one case as a process, writing `tmp`/MODEL-TOPO.json; its wall s, plan() s, simulations, step ms and the
    figures before."""
    out = os.path.join(tmp, f"{model}-{topo_name}.json")
    wall, cpu, proc = run_tag(["plan", os.path.join("datasets", "models", f"{model}.onnx"), topo_path, *flags,
                               "-o", out])
    plan = json.load(open(out))
    before = BEFORE.get((model, topo_name), (None, None, None))
    ms = plan["predicted"]["iteration_ms"]
    return {"case": f"{model} on {topo_name}", "wall": wall, "cpu": cpu, "plan_s": plan["search"]["seconds"],
            "sims": plan["search"]["simulations"], "ms": ms, "before": before, "lines": len(proc.stdout.splitlines()),
            "no_worse": before[2] is None or ms <= before[2] + NO_WORSE_MS}


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_rows(title: str, rows: list[dict]) -> None:
    from tag.textfmt import table

    print(title)
    print(table([[r["case"], _fmt(r["before"][0], ".1f"), f"{r['wall']:.1f}", f"{r['cpu']:.1f}", f"{r['plan_s']:.1f}",
                  _fmt(r["before"][1], "d"), r["sims"], _fmt(r["before"][2], ".2f"), f"{r['ms']:.2f}",
                  "yes" if r["no_worse"] else "NO"] for r in rows],
                ["case", "wall s before", "wall s", "CPU s", "plan() s", "sims before", "sims", "step ms before", "step ms",
                 "no worse"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-big", action="store_true", help="skip mixed1024 (5+ minutes)")
    ap.add_argument("--only-big", action="store_true", help="only mixed1024")
    ap.add_argument("--no-random", action="store_true", help="skip the random clusters")
    ap.add_argument("--plans-dir", default=None, help="keep the plans here (MODEL-TOPO.json), e.g. to diff two commits'")
    args = ap.parse_args(argv)
    print("load average (1, 5, 15 min) at the start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.plans_dir or scratch
        os.makedirs(tmp, exist_ok=True)
        if not args.only_big:
            rows = [plan_row(m, t, os.path.join("datasets", "topologies", f"{t}.json"), ["--json"], tmp)
                    for m in MODELS for t in TOPOLOGIES]
            print_rows("datasets models x topologies, default settings", rows)
            walls = [r["wall"] for r in rows]
            print(f"- wall s: median {statistics.median(walls):.1f}, max {max(walls):.1f} over {len(walls)} cases "
                  "(issue 24: median <= 10, max <= 60)")
            print(f"- plans no worse than before: {sum(r['no_worse'] for r in rows)} of {len(rows)}\n")
            if not args.no_random:
                from tag.bench.ablate import random_topology_file

                rows = [plan_row(m, f"random-{s}", random_topology_file(s, tmp), ["--json"], tmp)
                        for s in (1, 2, 3) for m in ("resnet50", "gpt2_medium")]
                print_rows("random clusters of benchmarks/ablate.md (seeds 1-3), default settings", rows)
                print(f"- plans no worse than before: {sum(r['no_worse'] for r in rows)} of {len(rows)}\n")
        if not args.no_big:
            topo = os.path.join("datasets", "topologies", "mixed1024.json")
            row = plan_row("resnet50", "mixed1024", topo, BIG_FLAGS, tmp)
            print_rows("mixed1024 (512 V100 + 512 A100, 16 racks, 4:1 spine), resnet50 at batch 65,536, momentum",
                       [row])
            wall, _, proc = run_tag(["simulate", os.path.join("datasets", "models", "resnet50.onnx"), topo, *BIG_FLAGS,
                                  "--baseline", "dp-even"])
            print(f"- tag plan: {row['wall']:.0f} s wall, {row['sims']} simulations, {row['lines']} lines printed "
                  "(issue 20: <= 300 s, >= 100 simulations, <= 200 lines)")
            print(f"- tag simulate --baseline dp-even: {wall:.1f} s wall, {len(proc.stdout.splitlines())} lines "
                  "(issue 20: <= 15 s)")
    print("load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Planning time of the `tag plan` process at default settings, against the figures before (issue 24 must-show 4, issue
20 must-show 3).

Run (alone on the machine's cores, as the figures in plan_time.md were taken):

    flock -x /work/cpu.lock python benchmarks/plan_time.py [--no-big] [--only-big] [--no-random]

1. The 9 datasets cases (resnet50, gpt2_medium, bert_large x heterog8, modern8, tag16), as benchmarks/ablate.md
   timed them: `tag plan MODEL TOPO --json -o P.json` (GNN priors, SFB, the search choosing the precision).
2. The random clusters of benchmarks/ablate.md (seeds 1-3, `tag.bench.ablate.random_topology_file`) with resnet50
   and gpt2_medium: the plan's predicted step against ablate.md's `full` column.
3. Unless --no-big: `tag plan datasets/models/resnet50.onnx datasets/topologies/mixed1024.json --batch-size 65536
   --optimizer momentum` (or each of `--big-models M1,M2`), and `tag simulate ... --baseline dp-even` on the same
   inputs, both as whole processes, with the lines the plan prints.

Each row prints the wall and CPU (user + system) seconds of the process, plan()'s own seconds (plan.json search.seconds), the simulations
(search.simulations) and the predicted step (predicted.iteration_ms) beside the previous figures (`BEFORE`), and
whether the step is no worse (within 0.01 ms of the figure before, or faster).

With `--against TREE` (another checkout or worktree, e.g. `git worktree add --detach /tmp/before <rev>`), each of
the 9 datasets cases (or of `--cases M:T,...`, e.g. `bert_large:hap64`) also runs there (cwd and PYTHONPATH =
TREE), right before or after this tree's run (the order alternating by case, so both see the same load), and the
table shows both trees' figures side by side; the two plan.json files are compared key by key (`search.seconds` and
paths aside) and every difference is printed. With
`--against TREE --big-models M1,M2`, the same for those models on mixed1024 instead of the datasets cases.
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


def run_tag(args: list[str], root: str = ROOT) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run `tag ARGS` as a process in the repository `root` (its `tag` package: cwd and PYTHONPATH); (wall s, CPU s of
    the process, the completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": root}
    proc = subprocess.run([sys.executable, "-m", "tag.cli", *args], capture_output=True, text=True, cwd=root, env=env)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"tag {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc


def plan_row(model: str, topo_name: str, topo_path: str, flags: list[str], tmp: str, root: str = ROOT) -> dict:
    """Plan one case as a process of the tree `root`, writing `tmp`/MODEL-TOPO.json; its wall s, plan() s,
    simulations, step ms and the figures before."""
    out = os.path.join(tmp, f"{model}-{topo_name}.json")
    wall, cpu, proc = run_tag(["plan", os.path.join("datasets", "models", f"{model}.onnx"), topo_path, *flags,
                               "-o", out], root)
    plan = json.load(open(out))
    before = BEFORE.get((model, topo_name), (None, None, None))
    ms = plan["predicted"]["iteration_ms"]
    return {"case": f"{model} on {topo_name}", "wall": wall, "cpu": cpu, "plan_s": plan["search"]["seconds"],
            "sims": plan["search"]["simulations"], "ms": ms, "before": before, "lines": len(proc.stdout.splitlines()),
            "no_worse": before[2] is None or ms <= before[2] + NO_WORSE_MS, "plan": plan}


def plan_differences(a, b, path: str = "") -> list[tuple[str, object, object]]:
    """(JSON path, a's value, b's value) of every leaf where two plan.json documents differ, `search.seconds` and
    paths (any key `path`, `search.gnn`, `search.structure_gnn`: checkpoint and checkout locations) aside."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}"
            if k == "path" or p in (".search.seconds", ".search.gnn", ".search.structure_gnn"):
                continue
            if k not in a or k not in b:
                out.append((p, a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                out += plan_differences(a[k], b[k], p)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in plan_differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path, a, b)]


def against_rows(other: str, tmp: str, cases: list[tuple[str, str]] | None = None) -> None:
    """The datasets cases (model, topology name; default the 9 of MODELS x TOPOLOGIES) in the tree `other` and in
    this one, back to back (order alternating by case): both trees' figures side by side, their medians and maxima,
    and the plans compared key by key."""
    from tag.textfmt import table

    rows, pairs, differing = [], [], 0
    for i, (m, t) in enumerate(cases or [(m, t) for m in MODELS for t in TOPOLOGIES]):
        topo = os.path.join("datasets", "topologies", f"{t}.json")
        runs = {}
        for name, root in ([("before", other), ("after", ROOT)] if i % 2 == 0 else
                           [("after", ROOT), ("before", other)]):
            os.makedirs(os.path.join(tmp, name), exist_ok=True)
            runs[name] = plan_row(m, t, topo, ["--json"], os.path.join(tmp, name), root)
        a, b = runs["before"], runs["after"]
        diffs = plan_differences(a["plan"], b["plan"])
        differing += bool(diffs)
        for p, x, y in diffs[:5]:
            print(f"  {a['case']}: {p}: {str(x)[:60]} -> {str(y)[:60]}")
        pairs.append((a, b))
        rows.append([a["case"], f"{a['wall']:.1f} / {b['wall']:.1f}", f"{a['cpu']:.1f} / {b['cpu']:.1f}",
                     f"{a['plan_s']:.1f} / {b['plan_s']:.1f}", f"{a['sims']} / {b['sims']}",
                     f"{a['ms']:.2f} / {b['ms']:.2f}", "yes" if not diffs else f"NO ({len(diffs)})"])
    print(f"before = {other}, after = {ROOT}")
    print(table(rows, ["case", "wall s before / after", "CPU s", "plan() s", "sims", "step ms", "same plan"]))
    for k, label in (("wall", "wall s"), ("cpu", "CPU s")):
        for j, which in ((0, "before"), (1, "after")):
            v = [pair[j][k] for pair in pairs]
            print(f"- {label} {which}: median {statistics.median(v):.1f}, max {max(v):.1f}")
    print(f"- plans identical (key by key, search.seconds and paths aside): {len(rows) - differing} of {len(rows)}\n")


def big_against_rows(other: str, models: list[str], tmp: str) -> None:
    """Each model on mixed1024 (`BIG_FLAGS`) in the tree `other` and in this one, back to back (order alternating
    by model): wall and CPU s, simulations, step, and the plans compared key by key."""
    from tag.textfmt import table

    topo = os.path.join(ROOT, "datasets", "topologies", "mixed1024.json")
    rows = []
    for i, m in enumerate(models):
        runs = {}
        for name, root in ([("before", other), ("after", ROOT)] if i % 2 == 0 else
                           [("after", ROOT), ("before", other)]):
            os.makedirs(os.path.join(tmp, name), exist_ok=True)
            runs[name] = plan_row(m, "mixed1024", topo, BIG_FLAGS, os.path.join(tmp, name), root)
        a, b = runs["before"], runs["after"]
        diffs = plan_differences(a["plan"], b["plan"])
        for p, x, y in diffs[:5]:
            print(f"  {a['case']}: {p}: {str(x)[:60]} -> {str(y)[:60]}")
        rows.append([a["case"], f"{a['wall']:.1f} / {b['wall']:.1f}", f"{a['cpu']:.1f} / {b['cpu']:.1f}",
                     f"{a['sims']} / {b['sims']}", f"{a['ms']:.2f} / {b['ms']:.2f}",
                     "yes" if not diffs else f"NO ({len(diffs)}: {', '.join(p for p, _, _ in diffs[:3])})"])
    print(f"before = {other}, after = {ROOT}; mixed1024, {' '.join(BIG_FLAGS)}")
    print(table(rows, ["case", "wall s before / after", "CPU s", "sims", "step ms", "same plan"]) + "\n")


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
    ap.add_argument("--against", default=None, metavar="TREE",
                    help="time the 9 datasets cases in TREE too, back to back with this tree, and compare the plans")
    ap.add_argument("--cases", default=None, metavar="M:T,M:T",
                    help="with --against: these datasets cases (model:topology, e.g. bert_large:hap64) instead of "
                         "the 9")
    ap.add_argument("--big-models", default=None, metavar="M1,M2",
                    help="the models planned on mixed1024 (default resnet50); with --against, those (and no "
                         "datasets case) in both trees")
    args = ap.parse_args(argv)
    if args.cases and not args.against:
        ap.error("--cases needs --against TREE (it picks the cases timed in both trees)")
    print("load average (1, 5, 15 min) at the start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.plans_dir or scratch
        os.makedirs(tmp, exist_ok=True)
        if args.against and args.big_models:
            big_against_rows(os.path.abspath(args.against), args.big_models.split(","), tmp)
        elif args.against:
            cases = [tuple(c.split(":", 1)) for c in args.cases.split(",")] if args.cases else None
            against_rows(os.path.abspath(args.against), tmp, cases)
        elif not args.only_big:
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
        if not args.no_big and not args.against:
            topo = os.path.join("datasets", "topologies", "mixed1024.json")
            big = (args.big_models or "resnet50").split(",")
            rows = [plan_row(m, "mixed1024", topo, BIG_FLAGS, tmp) for m in big]
            print_rows("mixed1024 (512 V100 + 512 A100, 16 racks, 4:1 spine), batch 65,536, momentum", rows)
            row = rows[0]
            wall, _, proc = run_tag(["simulate", os.path.join("datasets", "models", f"{big[0]}.onnx"), topo, *BIG_FLAGS,
                                  "--baseline", "dp-even"])
            print(f"- tag plan ({big[0]}): {row['wall']:.0f} s wall, {row['sims']} simulations, {row['lines']} lines "
                  "printed (issue 20: <= 300 s, >= 100 simulations, <= 200 lines)")
            print(f"- tag simulate --baseline dp-even: {wall:.1f} s wall, {len(proc.stdout.splitlines())} lines "
                  "(issue 20: <= 15 s)")
    print("load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

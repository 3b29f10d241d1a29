"""How many structure-tree playouts the structure network's priors save (issue 24, must-show 2).

    python benchmarks/structure_gnn.py --out benchmarks/structure_gnn.md

For each case (the ablation's datasets models x topologies, and its models on random clusters of seeds 1..R, which
neither network trained on: the structure network's instances use seeds from 1,000,000, the per-group GNN's from
10,000) the structure tree runs from `plan()`'s start (`tag.gnn.structure_selfplay.start_tree`: the baselines, the
memory pass's variants, the DP's pipelines, `pick_start`; Adam, the model's batch, roofline costs, the precision
`tag plan` chooses) for
max(N) playouts, once with uniform priors and once with the shipped structure network's, same seed. After every
playout it records the best iteration time the search has simulated (the starts included). For each N:

    U(N)      the uniform tree's best ms after N playouts
    k_gnn(N)  the fewest playouts after which the network-guided tree's best is within 1% of U(N) in speed
              (best_gnn(k) <= U(N) / 0.99); k_unif(N) the same for the uniform tree itself

and the geomean over cases of max(k, 1) (a case the start already solves counts as 1 playout; one the network never
reaches in max(N) playouts counts as max(N) + 1 and is marked). The issue's goal: geomean k_gnn(N) <= N / 5.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODELS = ("resnet50", "gpt2_medium", "bert_large")
TOPOLOGIES = ("heterog8", "modern8", "tag16")
RANDOM_MODELS = ("resnet50", "gpt2_medium")


def curve(inp, cost, training, priors_fn, playouts: int, seed: int) -> tuple[list[float], float]:
    """(best iteration ms after 0, 1, ..., playouts playouts (the last repeated when the tree is exhausted early),
    seconds of the tree run) of the structure tree under (cost, training)."""
    from tag.gnn.structure_selfplay import start_tree

    run = start_tree(inp.gg, inp.cluster, cost, training, seed=seed, priors_fn=priors_fn)
    ev = run.evaluator

    def best_ms() -> float:
        r = ev.result(ev.best[1])
        return math.inf if r.oom else r.iteration_ms

    out = [best_ms()]
    t0 = time.monotonic()
    run.tree.run(playouts, on_playout=lambda done, v: out.append(best_ms()))
    seconds = time.monotonic() - t0
    out += [out[-1]] * (playouts + 1 - len(out))
    return out, seconds


def playouts_to_reach(c: list[float], target_ms: float) -> int | None:
    """The fewest playouts k with c[k] <= target_ms / 0.99 (None: never)."""
    return next((k for k, ms in enumerate(c) if ms <= target_ms / 0.99), None)


def run_case(model: str, topology_path: str, name: str, ns: list[int], seed: int, checkpoint: str | None = None) -> dict:
    from tag.bench.data import case_files
    from tag.gnn.checkpoint import default_structure_checkpoint
    from tag.gnn.structure_priors import load_structure_priors_fn
    from tag.modelio import ModelOptions, load_inputs

    from dataclasses import replace

    from tag.modelio import cost_model_for
    from tag.search.precision import choose_precision
    from tag.search.search_start import PIPELINE_MAX_DEVICES

    model_path = os.fspath(case_files(model, TOPOLOGIES[0], None).model_path)
    inp = load_inputs(model_path, topology_path, ModelOptions())
    seeds = choose_precision(inp.gg, inp.cluster, inp.training, lambda p: cost_model_for(
        inp.gg, replace(inp.training, precision=p), topology_path),
        pipelines=inp.cluster.n_devices <= PIPELINE_MAX_DEVICES).seeds  # as `tag plan` chooses it (since 5765968)
    top = max(ns)
    uni, s_uni = curve(inp, seeds.cost, seeds.training, None, top, seed)
    # the network's features as `tag plan` builds them (the loaded inputs' cost model)
    gnn_fn = load_structure_priors_fn(checkpoint or default_structure_checkpoint(), inp.gg, inp.cluster, inp.cost, inp.training)
    gnn, s_gnn = curve(inp, seeds.cost, seeds.training, gnn_fn, top, seed)
    row = {"case": f"{model} on {name} ({seeds.training.precision})", "start_ms": uni[0], "seconds_uniform": s_uni, "seconds_gnn": s_gnn}
    for n in ns:
        row[n] = {"uniform_ms": uni[n], "gnn_ms": gnn[n], "k_gnn": playouts_to_reach(gnn, uni[n]),
                  "k_unif": playouts_to_reach(uni, uni[n])}
    return row


def geomean_k(rows: list[dict], n: int, key: str, cap: int) -> float:
    ks = [max(1, r[n][key]) if r[n][key] is not None else cap + 1 for r in rows]
    return math.exp(sum(math.log(k) for k in ks) / len(ks))


def markdown(rows: list[dict], ns: list[int], command: str) -> str:
    top = max(ns)
    head = ["case", "start ms"] + [x for n in ns for x in (f"U({n}) ms", f"G({n}) ms", f"k_gnn({n})",
                                                            f"k_unif({n})")] + ["s: uniform", "s: GNN"]
    lines = [f"    {command}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def k(v):
        return f">{top}" if v is None else str(v)
    for r in rows:
        cells = [r["case"], f"{r['start_ms']:.2f}"]
        for n in ns:
            x = r[n]
            cells += [f"{x['uniform_ms']:.2f}", f"{x['gnn_ms']:.2f}", k(x["k_gnn"]), k(x["k_unif"])]
        cells += [f"{r['seconds_uniform']:.1f}", f"{r['seconds_gnn']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for n in ns:
        solved = sum(1 for r in rows if r[n]["k_unif"] == 0)
        better = sum(1 for r in rows if r[n]["gnn_ms"] < r[n]["uniform_ms"] * (1 - 1e-9))
        worse = sum(1 for r in rows if r[n]["gnn_ms"] > r[n]["uniform_ms"] * (1 + 1e-9))
        lines.append(f"- N = {n}: geomean k_gnn = {geomean_k(rows, n, 'k_gnn', top):.2f} playouts (goal <= {n / 5:g}), "
                     f"geomean k_unif = {geomean_k(rows, n, 'k_unif', top):.2f}, over {len(rows)} cases; the start is "
                     f"already within 1% of U({n}) in {solved}; after {n} playouts the network-guided tree is faster "
                     f"in {better}, slower in {worse}")
        moved = [r for r in rows if r[n]["k_unif"] != 0]
        if moved:
            lines.append(f"  - on the {len(moved)} cases where the tree gains more than 1% over the start: geomean "
                         f"k_gnn = {geomean_k(moved, n, 'k_gnn', top):.2f}, k_unif = "
                         f"{geomean_k(moved, n, 'k_unif', top):.2f}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--playouts", type=int, nargs="+", default=[200, 400])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES))
    ap.add_argument("--random", type=int, default=3, help="random clusters of seeds 1..R (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--checkpoint", default=None, help="structure network to compare (default: the shipped one)")
    args = ap.parse_args(argv)
    import torch

    from tag.bench.ablate import random_topology_file
    from tag.bench.data import case_files

    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tag-structure-gnn-") as tmp:
        cases = [(m, os.fspath(case_files(m, t, None).topology_path), t) for m in args.models for t in args.topologies]
        for s in range(1, args.random + 1):
            path = random_topology_file(s, tmp)
            cases += [(m, path, f"random-{s}") for m in RANDOM_MODELS]
        for m, path, name in cases:
            rows.append(run_case(m, path, name, sorted(args.playouts), args.seed, args.checkpoint))
            print(f"{rows[-1]['case']}: " + ", ".join(f"N={n}: U {rows[-1][n]['uniform_ms']:.2f} k_gnn "
                                                        f"{rows[-1][n]['k_gnn']} k_unif {rows[-1][n]['k_unif']}"
                                                        for n in sorted(args.playouts)), file=sys.stderr, flush=True)
    command = "python benchmarks/structure_gnn.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(rows, sorted(args.playouts), command.strip())
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

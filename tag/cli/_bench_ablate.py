"""`tag bench --ablate`: the search's ablation table (`tag.bench.ablate`) over the suite's cases and random clusters.

Cases: every --models x --topologies pair (default: the quick suite's), then each model on `--random N` random
clusters (seeds 1..N, below the seeds `tag train` draws for either network, 10,000 and up for the per-group GNN
and 1,000,000 and up for the structure network, so neither trained on them; written to a temporary directory, each named random-SEED). Every column of a case is a `tag plan` command line, listed under the
table with the files it used.
"""

from __future__ import annotations

import os
import sys
import tempfile


def ablate(args):
    """(markdown, JSON object, exit code: 1 when a case failed)."""
    from tag.bench.ablate import AblationCase, PARTS, command_line, random_topology_file, run_ablation
    from tag.bench.ablate_format import ablation_markdown
    from tag.bench.data import CaseFiles, case_files
    from tag.bench.suite import QUICK_MODELS, QUICK_TOPOLOGIES
    from tag.cli.util import progress

    models = tuple(args.models or QUICK_MODELS)
    topologies = tuple(args.topologies or (() if args.random else QUICK_TOPOLOGIES))
    pairs = [(m, t, case_files(m, t, args.datasets)) for m in models for t in topologies]  # every file before work
    with tempfile.TemporaryDirectory(prefix="tag-ablate-") as tmp:
        for seed in range(1, (args.random or 0) + 1):
            path = random_topology_file(seed, tmp)
            for m in models:
                model_path = case_files(m, QUICK_TOPOLOGIES[0], args.datasets).model_path
                pairs.append((m, f"random-{seed}", CaseFiles(model_path, path)))
        bar = progress(total=len(pairs), desc="ablate", unit="case")
        cases, commands = [], []
        try:
            for m, t, files in pairs:
                bar.set_postfix_str(f"{m} on {t}")
                try:
                    cases.append(run_ablation(os.fspath(files.model_path), os.fspath(files.topology_path), model=m,
                                              topology=t, playouts=args.playouts, refine_simulations=args.simulations,
                                              budget_s=args.budget, seed=args.seed))
                except Exception as e:  # a failing case is reported in its row, the run goes on
                    first = str(e).splitlines()[0][:80] if str(e) else ""
                    cases.append(AblationCase(m, t, error=f"{type(e).__name__}: {first}"))
                bar.update(1)
        finally:
            bar.close()
        if pairs:  # the first case's command lines (random clusters are in the temporary directory only)
            _, _, files = pairs[0]
            commands = [f"{p}: " + command_line(p, os.fspath(files.model_path), os.fspath(files.topology_path),
                                                args.playouts, args.seed, args.simulations) for p in PARTS]
    text = "# tag bench --ablate\n\n" + ablation_markdown(cases, commands)
    obj = {"cases": [{"model": c.model, "topology": c.topology, "precision": c.precision, "ms": c.ms,
                      "bound_ms": c.bound_ms,
                      "shares": c.shares(), "simulations": c.simulations, "seconds": c.seconds, "error": c.error}
                     for c in cases]}
    failed = [c for c in cases if c.error]
    for c in failed:
        sys.stderr.write(f"tag bench: {c.model} on {c.topology} failed: {c.error}\n")
    return text, obj, 1 if failed else 0

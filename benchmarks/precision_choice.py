"""Which precision `tag plan` chooses, scored with and without the stage DP's pipeline starts.

Lab notes: benchmarks/precision_choice.md.

Run (one core; about 10 minutes for the default grid, the large models on hap64 taking a minute each):

    python benchmarks/precision_choice.py [--models M1,M2] [--topologies T1,T2] [--random R]

For every model x topology (datasets/models, datasets/topologies; `metis10` is the Metis example cluster file,
datasets/topologies/metis/metis_cluster.json, which `tag` reads directly) at `tag plan`'s default batch and optimizer,
each precision the search compares (`tag.search.precision.auto_precisions`) gets its seeds as `tag plan` makes them
(`make_seeds(scoring_only=True, pipelines=...)`), and the table prints two scores per precision: the fastest fitting
baseline or memory variant (the rule before commit 5765968) / the fastest fitting start with the pipeline starts too
(the rule since), and the precision each rule chooses (`tag.search.precision._better`: a later precision must be over
1 % faster). Clusters of more than 128 devices are skipped: no pipelines are searched there. `--random R` adds the
random clusters of seeds 1..R that benchmarks/ablate.md uses (`tag.bench.ablate.random_topology_file`), named
random-SEED.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("mlp", "small_cnn", "resnet_tiny", "inception_tiny", "bert_tiny", "gpt2_tiny", "transformer_tiny",
          "dlrm_tiny", "small_transformer", "fc_wide", "resnet50", "inception_v3", "transformer_base", "resnet101",
          "vgg19", "dlrm", "bert_large", "gpt2_medium")
TOPOLOGIES = ("heterog8", "modern8", "amp16", "metis10", "hap64")


def topology_path(name: str) -> str:
    if name.startswith("random-"):
        import tempfile

        from tag.bench.ablate import random_topology_file

        return random_topology_file(int(name.split("-")[1]), tempfile.mkdtemp(prefix="tag-precision-"))
    if name == "metis10":
        return os.path.join(ROOT, "datasets", "topologies", "metis", "metis_cluster.json")
    return os.path.join(ROOT, "datasets", "topologies", f"{name}.json")


def _cell(score: tuple[int, float]) -> str:
    """A `Seeds.score` as the table prints it: the fastest fitting start's ms, or the least overflow when none fits."""
    return f"{score[1]:.4g}" if score[0] == 0 else f"none fits (overflow x{score[1]:.3g})"


def case(model: str, topology: str) -> str:
    from tag.modelio import cost_model_for, load_inputs
    from tag.search.precision import _better, auto_precisions, make_seeds
    from tag.search.search_start import PIPELINE_MAX_DEVICES

    topo = topology_path(topology)
    inp = load_inputs(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"), topo)
    if inp.cluster.n_devices > PIPELINE_MAX_DEVICES:
        return f"| {model} | {topology} | (no pipelines above {PIPELINE_MAX_DEVICES} devices) | | | |"
    usable_gb = {d.id: d.type.usable_memory_bytes / 1e9 for d in inp.cluster.devices}
    t0 = time.process_time()
    old = new = None
    cells = []
    for p in auto_precisions(inp.cluster):
        training = replace(inp.training, precision=p)
        seeds = make_seeds(inp.gg, inp.cluster, cost_model_for(inp.gg, training, topo), training, scoring_only=True,
                           pipelines=True)
        # Seeds.score as the search reads it, without the pipeline starts (the rule before) and with them
        before = replace(seeds, pipeline_starts={}).score(usable_gb)
        after = seeds.score(usable_gb)
        cells.append(f"{p} {_cell(before)} / {_cell(after)}")
        if old is None or _better(before, old[1]):
            old = (p, before)
        if new is None or _better(after, new[1]):
            new = (p, after)
    changed = "**changed**" if old[0] != new[0] else ""
    return (f"| {model} | {topology} | {'; '.join(cells)} | {old[0]} | {new[0]} {changed} | "
            f"{time.process_time() - t0:.0f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--topologies", default=",".join(TOPOLOGIES))
    ap.add_argument("--random", type=int, default=0, help="also the random clusters of seeds 1..R")
    args = ap.parse_args(argv)
    topologies = [t for t in args.topologies.split(",") if t] + [f"random-{i}" for i in range(1, args.random + 1)]
    print("| model | cluster | per precision: baselines and variants / with pipeline starts (ms) | chosen before | "
          "chosen now | CPU s |")
    print("|---|---|---|---|---|---:|")
    for m in args.models.split(","):
        for t in topologies:
            print(case(m, t), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    sys.exit(main())

"""Baselines on the shipped models and clusters: `python benchmarks/baselines_bench.py [--models a,b] [--topologies x,y]`.

For every model x topology: simulated samples/s of each baseline (OOM shown as "oom"), the time to build
all baselines (strategy construction only, simulations of dp-proportional and single-device included),
and dp-proportional's speed-up over dp-even. Defaults: resnet50, vgg19, inception_v3 on heterog8 and
modern8 at each model's default batch; roofline cost model, Adam.
"""

from __future__ import annotations

import argparse
import os
import time

from tag.textfmt import table
from tag.cost import make_cost_model
from tag.graph import load_model
from tag.graph.coarsen import coarsen
from tag.search.baselines import BASELINES, build_baseline
from tag.sim import simulate
from tag.strategy import TrainingConfig
from tag.topology import load_topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(model: str, topo: str) -> list:
    """One table row: model, topology, batch, samples/s per baseline, build seconds, prop/even speed-up."""
    cluster = load_topology(os.path.join(ROOT, "datasets", "topologies", f"{topo}.json"))
    graph = load_model(os.path.join(ROOT, "datasets", "models", f"{model}.onnx"), n_devices=cluster.n_devices)
    gg = coarsen(graph, n_devices=cluster.n_devices)
    training = TrainingConfig()
    cost = make_cost_model(gg, training)
    cells, build_s, sps = [], 0.0, {}
    for name in BASELINES:
        t0 = time.perf_counter()
        s = build_baseline(name, gg, cluster, cost, training)
        build_s += time.perf_counter() - t0
        res = simulate(gg, cluster, cost, s, training)
        sps[name] = 0.0 if res.oom else res.samples_per_s
        cells.append("oom" if res.oom else f"{res.samples_per_s:,.0f}")
    speedup = sps["dp-proportional"] / sps["dp-even"] if sps["dp-even"] else float("nan")
    return [model, topo, graph.batch_size, *cells, f"{build_s:.2f}", f"{speedup:.2f}x"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,vgg19,inception_v3")
    ap.add_argument("--topologies", default="heterog8,modern8")
    a = ap.parse_args()
    rows = [bench(m, t) for m in a.models.split(",") for t in a.topologies.split(",")]
    print(table(rows, ["model", "topology", "batch", *[f"{n} /s" for n in BASELINES], "build s", "prop/even"]))


if __name__ == "__main__":
    main()

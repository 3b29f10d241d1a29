"""Simulator speed: ms per simulation of dp-even for every datasets model x topology.

Run: python benchmarks/sim_bench.py [--repeat N] [--models a,b] [--topologies x,y]
Prints one row per (model, topology): groups, devices, wall and CPU ms per simulation (median of N after one
warm-up run that fills the caches), simulations per second (wall), simulated iteration ms. The goal is ResNet-50
dp-even on hap64 <= 20 ms per simulation.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default="", help="comma-separated model stems (default: all)")
    ap.add_argument("--topologies", default="", help="comma-separated topology stems (default: all)")
    ap.add_argument("--baseline", default="dp-even", choices=["dp-even", "ps"])
    args = ap.parse_args(argv)
    from tag.cost import make_cost_model
    from tag.graph.coarsen import coarsen
    from tag.graph.load import load_model
    from tag.search import baselines
    from tag.sim import simulate
    from tag.strategy import TrainingConfig
    from tag.topology import load_topology

    models = sorted(glob.glob(os.path.join(ROOT, "datasets/models/*.onnx")))
    topos = sorted(glob.glob(os.path.join(ROOT, "datasets/topologies/*.json")))
    stem = lambda p: os.path.splitext(os.path.basename(p))[0]
    if args.models:
        models = [m for m in models if stem(m) in args.models.split(",")]
    if args.topologies:
        topos = [t for t in topos if stem(t) in args.topologies.split(",")]
    tc = TrainingConfig()
    build = baselines.dp_even if args.baseline == "dp-even" else baselines.ps
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall ms/sim grows with load; cpu ms/sim less)")
    print(f"{'model':<18} {'topology':<10} {'groups':>6} {'devices':>7} {'ms/sim':>8} {'cpu_ms':>8} {'sims/s':>8} {'iter_ms':>10}")
    for t in topos:
        cluster = load_topology(t)
        for m in models:
            graph = load_model(m, n_devices=cluster.n_devices)
            gg = coarsen(graph, n_devices=cluster.n_devices)
            cost = make_cost_model(gg, tc)
            st = build(gg, cluster, cost, tc, graph.batch_size)
            r = simulate(gg, cluster, cost, st, tc)  # warm-up: fills the cost caches
            times, cpu = [], []
            for _ in range(args.repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                simulate(gg, cluster, cost, st, tc)
                times.append((time.perf_counter() - t0) * 1e3)
                cpu.append((time.process_time() - c0) * 1e3)
            ms, cpu_ms = statistics.median(times), statistics.median(cpu)
            it = f"{r.iteration_ms:.2f}" if not r.oom else "OOM"
            print(f"{stem(m):<18} {stem(t):<10} {gg.n_groups:>6} {cluster.n_devices:>7} {ms:>8.2f} {cpu_ms:>8.2f} {1e3 / ms:>8.1f} {it:>10}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

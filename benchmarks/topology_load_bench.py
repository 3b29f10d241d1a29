"""Topology load time (parse + validate + all-pairs routes) for the shipped clusters and large random ones.

Run: python benchmarks/topology_load_bench.py   (target: hap64 well under 0.5 s)
"""

from __future__ import annotations

import glob
import os
import time

from tag.topology import load_topology, parse_topology, random_topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _best_ms(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "datasets", "topologies", "*.json"))):
        c = load_topology(path)
        rows.append((os.path.basename(path), c.n_devices, len(c.links) // 2, _best_ms(lambda: load_topology(path))))
    for seed in (0, 1):
        topo = random_topology(seed, min_machines=16, max_machines=16, layout="racks")
        c = parse_topology(topo, "r.json")
        rows.append((f"random racks seed {seed}", c.n_devices, len(c.links) // 2,
                     _best_ms(lambda: parse_topology(topo, "r.json"))))
    print(f"{'topology':<24} {'devices':>7} {'links':>6} {'load ms':>8}")
    for name, n, l, ms in rows:
        print(f"{name:<24} {n:>7} {l:>6} {ms:>8.1f}")


if __name__ == "__main__":
    main()

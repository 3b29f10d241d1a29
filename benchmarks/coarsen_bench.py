"""Coarsening speed and quality: `python benchmarks/coarsen_bench.py [MODEL.onnx ...]`.

Default models: light densenet121 and every datasets/models/*.onnx (GPT-2 medium among them once built).
Prints ops, atoms, K (default for 8 devices), coarsening time (best of 5), the heaviest group against the
ideal share (combined compute + memory weight) and against max(ideal share, heaviest atom) (the tests hold
this "max/bound" to at most 2), and the activation bytes per row crossing groups.
"""

from __future__ import annotations

import glob
import os
import sys
import time

import onnx

from tag.textfmt import table
from tag.graph import load_model
from tag.graph.coarsen import atom_weights, atoms_of, coarsen, default_group_count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")


def bench(path: str, n_devices: int = 8, repeats: int = 5) -> list:
    """One table row for the model at `path`."""
    t0 = time.perf_counter()
    graph = load_model(path)
    load_s = time.perf_counter() - t0
    k = default_group_count(graph, n_devices)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gg = coarsen(graph, k=k, n_devices=n_devices)
        times.append(time.perf_counter() - t0)
    atom = atoms_of(graph)
    w = atom_weights(graph, atom, max(atom) + 1)
    group_w = [sum(w[a] for a in {atom[i] for i in g.op_ids}) for g in gg.groups]
    return [os.path.basename(path), len(graph.ops), max(atom) + 1, gg.n_groups, f"{load_s:.2f}",
            f"{min(times) * 1000:.1f}", f"{max(group_w) / (w.sum() / gg.n_groups):.2f}",
            f"{max(group_w) / max(w.sum() / gg.n_groups, w.max()):.2f}",
            f"{sum(e.bytes_per_row for e in gg.edges):.0f}"]


def main(argv: list[str]) -> int:
    paths = argv or [os.path.join(LIGHT, "light_densenet121.onnx")] + sorted(
        glob.glob(os.path.join(ROOT, "datasets/models/*.onnx")))
    rows = [bench(p) for p in paths]
    print(table(rows, ["model", "ops", "atoms", "K", "load_s", "coarsen_ms", "max/ideal", "max/bound", "cut_bytes_per_row"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

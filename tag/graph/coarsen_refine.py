"""Boundary refinement of a partition of atoms: move single atoms to a neighbouring part when that cuts
fewer bytes, keeping every part within the weight cap, every part connected and the quotient graph acyclic.

A Fiduccia-Mattheyses-style greedy pass with only positive-gain moves (so the cut never grows), repeated
until no move helps or `max_passes` is reached. Deterministic: atoms are visited in order, ties go to the
smaller part id.
"""

from __future__ import annotations

from tag.graph.toposort import kahn_order
from collections import deque

import numpy as np


def refine_boundaries(parts: list[list[int]], weights: np.ndarray, edges: list[tuple[int, int]],
                      nets: list[tuple[int, tuple[int, ...], float]], cap: float,
                      max_passes: int = 4) -> list[list[int]]:
    """Refined parts (same count), in a topological order of the quotient graph.

    parts: atoms per part, in a topological order; weights: per atom; edges: atom edges (u, v);
    nets: one per tensor, (producer atom, consumer atoms, bytes); cap: the heaviest a part may become
    (parts already above it may only lose weight). The cut is sum over nets of bytes x the number of parts
    other than the producer's that consume it; a move is made only if it lowers the cut.
    """
    part = {a: p for p, atoms in enumerate(parts) for a in atoms}
    nbrs: dict[int, set[int]] = {a: set() for a in part}
    succ_atoms: dict[int, list[int]] = {a: [] for a in part}
    pred_atoms: dict[int, list[int]] = {a: [] for a in part}
    for (u, v) in edges:
        nbrs[u].add(v)
        nbrs[v].add(u)
        succ_atoms[u].append(v)
        pred_atoms[v].append(u)
    nets_of: dict[int, list[int]] = {a: [] for a in part}
    for n, (src, dsts, _) in enumerate(nets):
        for a in {src, *dsts}:
            nets_of[a].append(n)
    pw = [float(weights[atoms].sum()) for atoms in parts]
    size = [len(atoms) for atoms in parts]
    qcount: dict[tuple[int, int], int] = {}  # quotient edge -> number of atom edges on it
    for (u, v) in edges:
        if part[u] != part[v]:
            qcount[(part[u], part[v])] = qcount.get((part[u], part[v]), 0) + 1

    def net_cost(n: int) -> float:
        src, dsts, nbytes = nets[n]
        return nbytes * len({part[c] for c in dsts} - {part[src]})

    order = sorted(part)
    for _ in range(max_passes):
        moved = False
        for a in order:
            g = part[a]
            if size[g] == 1:
                continue
            before = sum(net_cost(n) for n in nets_of[a])
            gains = []
            for h in sorted({part[b] for b in nbrs[a]} - {g}):
                part[a] = h
                gains.append((before - sum(net_cost(n) for n in nets_of[a]), h))
                part[a] = g
            for gain, h in sorted(gains, key=lambda x: (-x[0], x[1])):
                if gain <= 0 or pw[h] + weights[a] > cap:
                    continue
                if not _stays_connected(a, g, size[g], part, nbrs):
                    break
                trial = dict(qcount)
                for key, d in _move_delta(a, g, h, part, succ_atoms, pred_atoms).items():
                    trial[key] = trial.get(key, 0) + d
                    if trial[key] == 0:
                        del trial[key]
                if not _acyclic(len(parts), trial):
                    continue
                qcount = trial
                part[a] = h
                pw[g] -= weights[a]
                pw[h] += weights[a]
                size[g] -= 1
                size[h] += 1
                moved = True
                break
        if not moved:
            break
    out: list[list[int]] = [[] for _ in parts]
    for a in order:
        out[part[a]].append(a)
    return [out[p] for p in _topo_order(len(parts), qcount)]


def _stays_connected(a: int, g: int, size_g: int, part: dict[int, int],
                     nbrs: dict[int, set[int]]) -> bool:
    """Is part g (size_g atoms, a among them) still weakly connected without atom a?"""
    start = next((b for b in nbrs[a] if part[b] == g), None)
    if start is None:
        return size_g == 1
    seen = {a, start}
    queue = deque([start])
    while queue:
        u = queue.popleft()
        for b in nbrs[u]:
            if b not in seen and part[b] == g:
                seen.add(b)
                queue.append(b)
    return len(seen) == size_g


def _move_delta(a: int, g: int, h: int, part: dict[int, int], succ_atoms: dict[int, list[int]],
                pred_atoms: dict[int, list[int]]) -> dict[tuple[int, int], int]:
    """Change in quotient edge counts when atom a moves from part g to part h (self loops not counted)."""
    delta: dict[tuple[int, int], int] = {}

    def add(x: int, y: int, d: int) -> None:
        if x != y:
            delta[(x, y)] = delta.get((x, y), 0) + d

    for b in succ_atoms[a]:
        add(g, part[b], -1)
        add(h, part[b], +1)
    for b in pred_atoms[a]:
        add(part[b], g, -1)
        add(part[b], h, +1)
    return delta


def _acyclic(n: int, qcount: dict[tuple[int, int], int]) -> bool:
    """Is the quotient graph with these edges acyclic?"""
    return len(_topo_order(n, qcount)) == n


def _topo_order(n: int, qcount: dict[tuple[int, int], int]) -> list[int]:
    """Kahn's order of parts 0..n-1 under the quotient edges, smallest ready id first (shorter if cyclic)."""
    succ: dict[int, list[int]] = {p: [] for p in range(n)}
    for (x, y) in qcount:
        succ[x].append(y)
    return kahn_order(range(n), succ)

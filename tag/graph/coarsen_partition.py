"""Partition passes over a DAG of atoms (plain integer ids 0..n-1, listed in a topological order).

1. `chain_order`: a depth-first topological order, so branches stay contiguous.
2. `min_bottleneck` + `partition_1d`: cut the order into k contiguous segments whose weight is at most
   (1 + slack) x the smallest possible maximum, minimising the bytes that cross the cuts (dynamic programming).
3. `split_disconnected` + `merge_to_k`: make every part weakly connected, then merge neighbouring parts back
   to k while the quotient graph stays acyclic.

Any contiguous cut of a topological order gives an acyclic quotient graph; splitting a part into its
components keeps that (components of one part have no edges between them), and `merge_to_k` only merges two
parts joined by an edge when no other path joins them, which is exactly when merging keeps it acyclic.
"""

from __future__ import annotations

from tag.graph.toposort import kahn_order
from collections import deque

import numpy as np


def chain_order(n: int, succ: list[list[int]]) -> list[int]:
    """A topological order of the DAG (atom ids 0..n-1 already topologically numbered) that follows chains.

    Kahn's algorithm with a stack: the atom readied last runs next, so a branch is finished before its
    sibling starts. Ties go to the smaller id; deterministic.

    >>> chain_order(4, [[1, 2], [3], [3], []])
    [0, 1, 2, 3]
    """
    indeg = [0] * n
    for u in range(n):
        for v in succ[u]:
            indeg[v] += 1
    stack = sorted((u for u in range(n) if indeg[u] == 0), reverse=True)
    order: list[int] = []
    while stack:
        u = stack.pop()
        order.append(u)
        ready = []
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
        stack.extend(sorted(set(ready), reverse=True))
    if len(order) != n:
        raise ValueError("atom graph has a cycle")
    return order


def _segments_needed(prefix: np.ndarray, cap: float) -> int:
    """Fewest contiguous segments with weight <= cap (greedy); a large number if an atom exceeds cap."""
    n = len(prefix) - 1
    i, count = 0, 0
    while i < n:
        j = int(np.searchsorted(prefix, prefix[i] + cap, side="right")) - 1
        if j <= i:
            return n + 1
        i, count = j, count + 1
    return count


def min_bottleneck(weights: np.ndarray, k: int) -> float:
    """The smallest C such that the sequence splits into at most k contiguous segments of weight <= C.

    Bisection on C with a greedy check, to a relative precision of 1e-9. Units of `weights`.

    >>> round(min_bottleneck(np.array([1.0, 2.0, 3.0, 4.0]), 2), 6)
    6.0
    """
    prefix = np.concatenate([[0.0], np.cumsum(weights)])
    total = float(prefix[-1])
    lo = max(float(weights.max(initial=0.0)), total / max(k, 1))
    hi = total
    if _segments_needed(prefix, lo * (1 + 1e-12) + 1e-300) <= k:
        return lo
    for _ in range(100):
        if hi - lo <= 1e-9 * hi:
            break
        mid = (lo + hi) / 2
        if _segments_needed(prefix, mid) <= k:
            hi = mid
        else:
            lo = mid
    return hi


def partition_1d(weights: np.ndarray, cut_cost: np.ndarray, k: int, cap: float) -> list[int]:
    """Cut a sequence into exactly k non-empty contiguous segments of weight <= cap, minimising the summed
    cost of the cuts. Returns the k start positions (the first is 0).

    weights: shape [n]; cut_cost: shape [n], cut_cost[i] = cost of a cut just before item i (cut_cost[0]
    unused). Requires k <= n and cap >= `min_bottleneck(weights, k)`. DP over segments with a sliding-window
    minimum: O(k n).

    >>> partition_1d(np.array([1.0, 1, 1, 1]), np.array([0.0, 5, 1, 5]), 2, 3.0)
    [0, 2]
    """
    n = len(weights)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    prefix = np.concatenate([[0.0], np.cumsum(weights)])
    tol = cap * 1e-9 + 1e-300
    # lo[j]: the smallest i with prefix[j] - prefix[i] <= cap (segment i..j-1 fits)
    lo = np.searchsorted(prefix, prefix - cap - tol, side="left")
    inf = float("inf")
    prev = [0.0 if prefix[j] <= cap + tol else inf for j in range(n + 1)]
    prev[0] = inf
    back: list[list[int]] = [[0] * (n + 1)]
    cost = cut_cost.tolist()
    lo_list = lo.tolist()
    for seg in range(2, k + 1):
        cur = [inf] * (n + 1)
        arg = [0] * (n + 1)
        window: deque[int] = deque()  # candidate starts i, increasing i, increasing value
        nxt = seg - 1  # next i to enter the window
        for j in range(seg, n + 1):
            while nxt <= j - 1:
                val = prev[nxt] + cost[nxt] if nxt < n else inf
                while window and prev[window[-1]] + cost[window[-1]] >= val:
                    window.pop()
                window.append(nxt)
                nxt += 1
            while window and window[0] < lo_list[j]:
                window.popleft()
            if window:
                i = window[0]
                cur[j] = prev[i] + cost[i]
                arg[j] = i
        back.append(arg)
        prev = cur
    if prev[n] == inf:
        raise ValueError("cap too small for k segments")
    starts = [0] * k
    j = n
    for seg in range(k, 1, -1):
        i = back[seg - 1][j]
        starts[seg - 1] = i
        j = i
    return starts


def split_disconnected(parts: list[list[int]], edges: list[tuple[int, int]]) -> list[list[int]]:
    """Split each part (a list of atoms) into its weakly connected components under `edges`.

    Components keep the atoms' relative order and come out ordered by their first atom's position in
    the part, so a topological order of parts stays one.
    """
    part_of = {a: p for p, atoms in enumerate(parts) for a in atoms}
    parent = {a: a for a in part_of}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for u, v in edges:
        if part_of[u] == part_of[v]:
            ru, rv = find(u), find(v)
            if ru != rv:
                parent[max(ru, rv)] = min(ru, rv)
    out: list[list[int]] = []
    for atoms in parts:
        comps: dict[int, list[int]] = {}
        for a in atoms:
            comps.setdefault(find(a), []).append(a)
        out.extend(comps.values())  # dict keeps first-seen order
    return out


def merge_to_k(parts: list[list[int]], weights: np.ndarray, edges: list[tuple[int, int]],
               edge_bytes: dict[tuple[int, int], float], k: int) -> list[list[int]]:
    """Merge parts joined by an edge until k remain, keeping the quotient graph acyclic.

    Each step merges the joined pair (src -> dst, with no other src ~> dst path) of smallest combined
    weight, ties to more bytes saved, then to the smaller ids. Stops early if no pair can merge (e.g. the
    graph has more weakly connected components than k). Returns parts in a topological order.
    """
    parts = [list(p) for p in parts]
    part_of = {a: p for p, atoms in enumerate(parts) for a in atoms}
    alive = set(range(len(parts)))
    pw = {p: float(weights[atoms].sum()) for p, atoms in enumerate(parts)}
    qbytes: dict[tuple[int, int], float] = {}
    for (u, v) in edges:
        pu, pv = part_of[u], part_of[v]
        if pu != pv:
            qbytes[(pu, pv)] = qbytes.get((pu, pv), 0.0) + edge_bytes.get((u, v), 0.0)
    while len(alive) > k:
        succ: dict[int, set[int]] = {p: set() for p in alive}
        for (a, b) in qbytes:
            succ[a].add(b)
        order = _topo(alive, succ)
        reach: dict[int, int] = {}  # bitset of parts reachable from p (including p)
        for p in reversed(order):
            r = 1 << p
            for s in succ[p]:
                r |= reach[s]
            reach[p] = r
        best = None
        for (a, b), nbytes in qbytes.items():
            if any(s != b and (reach[s] >> b) & 1 for s in succ[a]):
                continue  # another path a ~> b: merging would close a cycle
            key = (pw[a] + pw[b], -nbytes, min(a, b), max(a, b))
            if best is None or key < best[0]:
                best = (key, a, b)
        if best is None:
            break
        _, a, b = best
        keep, gone = min(a, b), max(a, b)
        parts[keep] = parts[a] + parts[b]
        pw[keep] = pw[a] + pw[b]
        alive.discard(gone)
        merged: dict[tuple[int, int], float] = {}
        for (x, y), nb in qbytes.items():
            x = keep if x == gone else x
            y = keep if y == gone else y
            if x != y:
                merged[(x, y)] = merged.get((x, y), 0.0) + nb
        qbytes = merged
    succ = {p: set() for p in alive}
    for (a, b) in qbytes:
        succ[a].add(b)
    return [parts[p] for p in _topo(alive, succ)]


def _topo(nodes: set[int], succ: dict[int, set[int]]) -> list[int]:
    """Kahn's order of `nodes`, smallest ready id first."""
    order = kahn_order(sorted(nodes), succ)
    if len(order) != len(nodes):
        raise ValueError("quotient graph has a cycle")
    return order

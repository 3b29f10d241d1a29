"""The pipeline dynamic program (Metis / Alpa style): contiguous cuts of the groups and of the devices into stages
that minimise the slowest stage.

Groups come in topological order and devices in a fixed order (topology order: whole machines together). A
pipeline of S stages cuts the groups at positions 0 = a_0 < a_1 < ... < a_S = G (stage s runs groups
[a_s, a_{s+1})) and the devices at 0 = b_0 < b_1 < ... < b_S <= N (stage s runs on devices [b_s, b_{s+1}); devices
past b_S stay idle). Cuts are taken from given position sets (`group_cuts`, `device_cuts`). With
stage_ms(left, a, a', b, b') the time of one stage (``left`` = S - s, the stages from this one to the last,
which sizes the micro-batches it keeps in flight; inf when it cannot run), the DP over suffixes

    f[1][i][j] = min_{j' > j} stage_ms(1, i, G, j, j')
    f[t][i][j] = min_{i' > i, j' > j} max(stage_ms(t, i, i', j, j'), f[t-1][i'][j'])

gives f[S][0][0] = the least slowest-stage time with S stages, for every S up to `max_stages` in one pass
(O(S x |group_cuts|^2 x |device_cuts|^2) stage_ms look-ups, each memoised by the caller if costly).

A pipeline's iteration is not its slowest stage's total, though: each stage s has a steady part p_s (its
micro-batches, paid in the steady state by the slowest stage only) and a tail e_s (its gradient sync after the
last backward, paid once at the end by the worst one), so the iteration is about max_s p_s + max_s e_s, not
max_s (p_s + e_s). Minimising the latter charges every stage its own sync and moves work off the stages that sync
the most (a first stage that holds the embedding on two machines), which slows the steady state that every
micro-batch pays. `best_capped_cuts` minimises the sum of the two maxima: for a cap E on the tails it runs the DP
on p alone with every stage whose tail exceeds E infeasible, giving P(E); then

    min over cuts of (max_s p_s + max_s e_s) = min over E of (P(E) + E)

exactly when E ranges over every distinct tail value (the optimal cut's own max tail is one of them), and
approximately over a ladder of caps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class StageCut:
    """One stage of a DP solution: groups [lo, hi) and device positions [dlo, dhi)."""

    lo: int
    hi: int
    dlo: int
    dhi: int


@dataclass(frozen=True)
class CutSolution:
    """The stages of one pipeline (first to last) and its slowest stage time, ms."""

    stages: tuple[StageCut, ...]
    slowest_ms: float
    tail_ms: float = 0.0  # best_capped_cuts: the largest tail among the stages (0 otherwise)

    @property
    def two_max_ms(self) -> float:
        """slowest_ms + tail_ms: the objective `best_capped_cuts` minimises."""
        return self.slowest_ms + self.tail_ms


StageFn = Callable[[int, int, int, int, int], float]  # (left, lo, hi, dlo, dhi) -> ms, inf if infeasible


def best_cuts(group_cuts: Sequence[int], device_cuts: Sequence[int], max_stages: int,
              stage_ms: StageFn) -> dict[int, CutSolution]:
    """S -> the cuts with the least slowest stage among S-stage pipelines (S = 1 .. max_stages; an S with no
    feasible pipeline is absent). `group_cuts` must start at 0 and end at G, `device_cuts` start at 0 and end at
    N (both ascending). Ties keep the first found (smaller cut positions first).

    >>> t = lambda left, lo, hi, dlo, dhi: (hi - lo) / (dhi - dlo)
    >>> sols = best_cuts([0, 1, 2, 3, 4], [0, 1, 2], 2, t)
    >>> sols[1].slowest_ms, sols[2].slowest_ms
    (2.0, 2.0)
    """
    gc, dc = list(group_cuts), list(device_cuts)
    n_g, n_d = len(gc), len(dc)
    inf = math.inf
    # f[t][i][j]: best for groups gc[i]..G on devices from dc[j] with t stages; arg[t][i][j]: (i', j') chosen
    f: list[list[list[float]]] = [[[inf] * n_d for _ in range(n_g)]]
    arg: list[list[list[tuple[int, int] | None]]] = [[[None] * n_d for _ in range(n_g)]]
    last = n_g - 1
    f1 = [[inf] * n_d for _ in range(n_g)]
    a1: list[list[tuple[int, int] | None]] = [[None] * n_d for _ in range(n_g)]
    for i in range(last):
        for j in range(n_d - 1):
            for j2 in range(j + 1, n_d):
                v = stage_ms(1, gc[i], gc[last], dc[j], dc[j2])
                if v < f1[i][j]:
                    f1[i][j], a1[i][j] = v, (last, j2)
    f.append(f1)
    arg.append(a1)
    for t in range(2, max_stages + 1):
        ft = [[inf] * n_d for _ in range(n_g)]
        at: list[list[tuple[int, int] | None]] = [[None] * n_d for _ in range(n_g)]
        prev = f[t - 1]
        for i in range(last):
            lo, ft_i, at_i = gc[i], ft[i], at[i]
            for j in range(n_d - 1):
                dlo, j_next = dc[j], j + 1
                best, best_arg = inf, None
                for i2 in range(i + 1, last):
                    row, hi = prev[i2], gc[i2]
                    for j2 in range(j_next, n_d - 1):
                        rest = row[j2]
                        if rest >= best:
                            continue
                        v = stage_ms(t, lo, hi, dlo, dc[j2])
                        if rest > v:  # max(v, rest)
                            v = rest
                        if v < best:
                            best, best_arg = v, (i2, j2)
                ft_i[j], at_i[j] = best, best_arg
        f.append(ft)
        arg.append(at)
    out: dict[int, CutSolution] = {}
    for s in range(1, max_stages + 1):
        if not math.isfinite(f[s][0][0]):
            continue
        stages, i, j = [], 0, 0
        for t in range(s, 0, -1):
            i2, j2 = arg[t][i][j]
            stages.append(StageCut(gc[i], gc[i2], dc[j], dc[j2]))
            i, j = i2, j2
        out[s] = CutSolution(tuple(stages), f[s][0][0])
    return out


def best_capped_cuts(group_cuts: Sequence[int], device_cuts: Sequence[int], max_stages: int,
                     steady_ms: StageFn, tail_ms: StageFn, caps: Sequence[float],
                     parts_ms: Callable[[int, int, int, int, int], tuple[float, float]] | None = None,
                     capped_ms: Callable[[float], StageFn] | None = None) -> dict[int, list[CutSolution]]:
    """S -> the DP's cuts under every tail cap E of `caps` (distinct cuts only, loosest cap first; a cap the looser
    cap's solutions already meet for every S is skipped, its minima being theirs): the least slowest
    `steady_ms` among S-stage pipelines whose every stage has `tail_ms` <= E, with tail_ms of the solution = its
    largest stage tail. min(two_max_ms) over a list is the least max steady + max tail over the cuts when `caps`
    holds every distinct tail value (`brute_force_two_max`), an upper bound on it otherwise. `parts_ms`, if given,
    returns (steady_ms(*args), tail_ms(*args)) at once (memoised by the caller), in place of calling the two;
    `capped_ms(E)`, if given, is the DP's stage function under cap E (steady_ms, or inf where tail_ms > E), one call
    per stage in place of two (the caller reading its memo directly).

    >>> steady = lambda left, lo, hi, dlo, dhi: float(hi - lo)
    >>> tail = lambda left, lo, hi, dlo, dhi: 5.0 * (lo == 0) * (hi - lo)
    >>> sols = best_capped_cuts([0, 1, 2, 3, 4], [0, 1, 2], 2, steady, tail, [math.inf, 5.0])
    >>> [(c.slowest_ms, c.tail_ms) for c in sols[2]]  # uncapped: 2 + 2 groups; capped: 1 + 3 groups
    [(2.0, 10.0), (3.0, 5.0)]
    """
    memo: dict[tuple[int, int, int, int, int], tuple[float, float]] = {}

    def parts(*args) -> tuple[float, float]:
        x = memo.get(args)
        if x is None:
            x = memo[args] = (steady_ms(*args), tail_ms(*args))
        return x

    if parts_ms is not None:
        parts = parts_ms

    out: dict[int, list[CutSolution]] = {}
    for cap in sorted(caps, reverse=True):
        if out and all(found[-1].tail_ms <= cap for found in out.values()):
            continue  # the looser cap's solutions meet this one: same least slowest for every S
        def capped(left: int, lo: int, hi: int, dlo: int, dhi: int, cap=cap, inf=math.inf) -> float:
            p, e = parts(left, lo, hi, dlo, dhi)
            return p if e <= cap else inf
        if capped_ms is not None:
            capped = capped_ms(cap)
        for s, sol in best_cuts(group_cuts, device_cuts, max_stages, capped).items():
            n = len(sol.stages)
            tail = max(parts(n - i, c.lo, c.hi, c.dlo, c.dhi)[1] for i, c in enumerate(sol.stages))
            found = out.setdefault(s, [])
            if all(x.stages != sol.stages for x in found):
                found.append(CutSolution(sol.stages, sol.slowest_ms, tail))
    return out


def brute_force_two_max(group_cuts: Sequence[int], device_cuts: Sequence[int], n_stages: int,
                        steady_ms: StageFn, tail_ms: StageFn) -> float:
    """The least max steady + max tail over every S-stage cut whose stages are all feasible (steady finite), by
    enumeration (for tests)."""
    best = math.inf
    for args in _every_cut(group_cuts, device_cuts, n_stages):
        p = max(steady_ms(*x) for x in args)
        if math.isfinite(p):
            best = min(best, p + max(tail_ms(*x) for x in args))
    return best


def brute_force_cuts(group_cuts: Sequence[int], device_cuts: Sequence[int], n_stages: int,
                     stage_ms: StageFn) -> float:
    """The least slowest-stage time over every S-stage cut, by enumeration (for tests)."""
    return min((max(stage_ms(*x) for x in args) for args in _every_cut(group_cuts, device_cuts, n_stages)),
               default=math.inf)


def _every_cut(group_cuts: Sequence[int], device_cuts: Sequence[int], n_stages: int):
    """Every S-stage cut as its stages' StageFn arguments [(left, lo, hi, dlo, dhi), ...], first stage first."""
    from itertools import combinations

    gc, dc = list(group_cuts), list(device_cuts)
    for inner_g in combinations(gc[1:-1], n_stages - 1):
        a = (gc[0],) + inner_g + (gc[-1],)
        for b in combinations(dc[1:], n_stages):
            bb = (dc[0],) + b
            yield [(n_stages - s, a[s], a[s + 1], bb[s], bb[s + 1]) for s in range(n_stages)]

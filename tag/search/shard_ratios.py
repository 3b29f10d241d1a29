"""Shard ratios as a linear program (HAP, EuroSys'24): the shares of a sharded group's weights per position.

A sharded group runs on a grid of R replicas x k positions (`tag.strategy.shard.Shard`). Position j holds the
share r_j of every sliced weight in every replica. Device (r, j) takes

    time_rj = r_j x work_ms[r][j] + fixed_ms[r][j]       (ms)

where work_ms is the time it would take for the group's sharded work (the ops `ShardLayout.sharded_ops`) at its
replica's rows on its own, and fixed_ms the work it repeats whole (the ops before a column half, LayerNorms) plus
anything that does not scale with its share. Its memory is

    mem_rj = r_j x sliced_bytes[r][j] + whole_bytes[r][j] <= usable_bytes[r][j]     (bytes)

(sliced: the sliced parameters with their gradients and optimizer states, and the split activations; whole: the
rest). The program:

    minimise t   subject to   t >= time_rj for every (r, j),   mem_rj <= usable_rj,   sum_j r_j = 1,   r_j >= 0,

solved by GLOP (`solve_ratios`); among the shares with that optimum t, a second solve takes the ones with the least
total time (sum of time_rj), so the shares are unique where the slowest device does not pin them all. Shares then
become whole units (`whole_unit_ratios`): columns by `tag.strategy.shard.shard_sizes` when that split fits memory;
heads (and columns it does not fit) by the best exact split near the LP's shares (each n_j within one unit of
U r_j), every position keeping at least one unit, memory re-checked.

>>> sol = solve_ratios(RatioProblem(work_ms=((4.0, 4.0 / 3.0),)))  # speeds 1 : 3
>>> [round(r, 6) for r in sol.ratios], round(sol.slowest_ms, 6)
([0.25, 0.75], 1.0)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from tag.strategy.shard import shard_sizes

TIE_SLACK = 1e-9  # the second solve keeps t within this relative slack of the first's optimum


@dataclass(frozen=True)
class RatioProblem:
    """The LP's data over a grid of R replicas x k positions (module docstring); every field is R rows of k values.

    work_ms: time of the whole sharded work on device (r, j), ms; fixed_ms: its unsharded time, ms (default 0);
    sliced_bytes: bytes a device would hold of the sliced state with share 1; whole_bytes: bytes it holds whole;
    usable_bytes: its usable memory (None: no memory constraint).
    """

    work_ms: tuple[tuple[float, ...], ...]
    fixed_ms: tuple[tuple[float, ...], ...] | None = None
    sliced_bytes: tuple[tuple[float, ...], ...] | None = None
    whole_bytes: tuple[tuple[float, ...], ...] | None = None
    usable_bytes: tuple[tuple[float, ...], ...] | None = None

    @property
    def k(self) -> int:
        return len(self.work_ms[0])

    def cells(self):
        """(r, j, work, fixed, sliced, whole, usable) of every device of the grid; memory terms 0 / inf when absent."""
        for r, row in enumerate(self.work_ms):
            for j, w in enumerate(row):
                yield (r, j, w, _at(self.fixed_ms, r, j, 0.0), _at(self.sliced_bytes, r, j, 0.0),
                       _at(self.whole_bytes, r, j, 0.0), _at(self.usable_bytes, r, j, math.inf))

    def slowest_ms(self, ratios) -> float:
        """max over devices of r_j x work + fixed, ms."""
        return max(ratios[j] * w + f for _, j, w, f, *_ in self.cells())

    def total_ms(self, ratios) -> float:
        """sum over devices of r_j x work + fixed, ms (the tie-break)."""
        return sum(ratios[j] * w + f for _, j, w, f, *_ in self.cells())

    def fits(self, ratios, tol: float = 1e-9) -> bool:
        """Whether every device holds its share: r_j x sliced + whole <= usable (relative tolerance `tol`)."""
        return all(ratios[j] * s + h <= u * (1 + tol) for _, j, _, _, s, h, u in self.cells())


def _at(grid, r: int, j: int, default: float) -> float:
    return default if grid is None else float(grid[r][j])


@dataclass(frozen=True)
class RatioSolution:
    """Shares per position (sum 1) and the slowest device's time under them, ms."""

    ratios: tuple[float, ...]
    slowest_ms: float


def solve_ratios(problem: RatioProblem) -> RatioSolution | None:
    """The LP of the module docstring by GLOP; None when no shares fit every device's memory.

    >>> solve_ratios(RatioProblem(work_ms=((2.0, 2.0),), sliced_bytes=((10.0, 10.0),), usable_bytes=((4.0, 4.0),)))
    """
    from ortools.linear_solver import pywraplp

    def build(objective_t: float | None):
        solver = pywraplp.Solver.CreateSolver("GLOP")
        r = [solver.NumVar(0.0, 1.0, f"r{j}") for j in range(problem.k)]
        t = solver.NumVar(0.0, solver.infinity(), "t")
        solver.Add(sum(r) == 1.0)
        for _, j, w, f, s, h, u in problem.cells():
            solver.Add(t >= r[j] * w + f)
            if math.isfinite(u):
                solver.Add(r[j] * s + h <= u)
        if objective_t is None:
            solver.Minimize(t)
        else:
            solver.Add(t <= objective_t * (1 + TIE_SLACK) + TIE_SLACK)
            solver.Minimize(sum(r[j] * w for _, j, w, *_ in problem.cells()))
        status = solver.Solve()
        if status != pywraplp.Solver.OPTIMAL:
            return None
        return [max(0.0, x.solution_value()) for x in r], t.solution_value()

    first = build(None)
    if first is None:
        return None
    second = build(first[1]) or first
    shares = second[0]
    total = sum(shares)
    ratios = tuple(x / total for x in shares)
    return RatioSolution(ratios, problem.slowest_ms(ratios))


def whole_unit_ratios(problem: RatioProblem, ratios, units: int, exact: bool) -> RatioSolution | None:
    """Shares that split `units` whole units, each position at least one, fitting memory; None if there are none
    near `ratios` (module docstring). Not `exact` (columns): `shard_sizes(units, ratios)` / units when it fits;
    otherwise, and for heads, among the splits n summing to `units` with n_j in floor(units r_j) - 1 ..
    floor(units r_j) + 1 for j < k - 1 and the last within 2 units of units r_(k-1), the one that fits with the
    least slowest time (ties: the least total time, then the smallest distance to `ratios`, then enumeration order).

    >>> p = RatioProblem(work_ms=((4.0, 4.0 / 3.0),))
    >>> whole_unit_ratios(p, (0.25, 0.75), 6, exact=True).ratios  # 1.5 / 4.5 heads: 1 / 5 (1.11 ms) beats 2 / 4
    (0.16666666666666666, 0.8333333333333334)
    """
    k = len(ratios)
    if units < k:
        return None
    if not exact:
        sizes = shard_sizes(units, ratios)
        shares = tuple(n / units for n in sizes)
        if min(sizes) >= 1 and problem.fits(shares):
            return RatioSolution(shares, problem.slowest_ms(shares))
    floors = [math.floor(units * r) for r in ratios]
    best = None
    for delta in itertools.product((-1, 0, 1), repeat=k - 1):
        sizes = [f + d for f, d in zip(floors, delta)]
        last = units - sum(sizes)
        sizes.append(last)
        if min(sizes) < 1 or abs(last - units * ratios[-1]) >= 2:
            continue
        shares = tuple(n / units for n in sizes)
        if not problem.fits(shares):
            continue
        key = (problem.slowest_ms(shares), problem.total_ms(shares), sum(abs(a - b) for a, b in zip(shares, ratios)))
        if best is None or key < best[0]:
            best = (key, shares)
    return None if best is None else RatioSolution(best[1], best[0][0])

"""The suite's "ideal" column: a lower bound on the iteration time of any strategy, from the cost model itself.

Every group g must run forward and backward for all B rows of the batch, split over the devices in any way.
Let c[g][t] = group_fwd_ms(g, t, B) + group_bwd_ms(g, t, B) be the time of the whole batch of group g on one
device of type t, and x[g][t] the fraction of g's rows that devices of type t compute (n_t such devices). When a
group's time per row does not grow with its rows (t(r) / r non-increasing: fixed launch and size-dependent
efficiency make small slices no cheaper per row, as in the roofline model), r rows cost at least r / B x c[g][t],
so the busiest device computes for at least the optimum T of the linear program

    minimise T  subject to  sum_t x[g][t] = 1 for every g,   sum_g x[g][t] c[g][t] <= n_t T for every t,   x >= 0.

T ignores communication, memory limits, the optimizer update and dependencies, and relaxes unsplittable groups
to fractions, so no strategy the simulator scores is faster. With one device type, T = sum_g c[g] / n.
(A FLOPs / peak bound is not one: the cost model runs FP32 3x3 convolutions faster than their FLOPs at peak
through the Winograd factor, and memory-bound groups far slower.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IdealBound:
    """The bound in ms and the LP's inputs: group x type times (ms) and devices per type."""

    iteration_ms: float
    type_names: tuple[str, ...]
    devices_per_type: tuple[int, ...]
    group_type_ms: tuple[tuple[float, ...], ...]  # [group][type]


def min_makespan_ms(group_type_ms: list[list[float]], devices_per_type: list[int]) -> float:
    """Optimum T of the linear program in the module docstring (GLOP), ms.

    >>> round(min_makespan_ms([[1.0, 4.0], [4.0, 1.0]], [1, 1]), 9)  # each group on the type that is fast for it
    1.0
    >>> round(min_makespan_ms([[3.0], [5.0]], [4]), 9)  # one type: total work over the devices
    2.0
    """
    if not group_type_ms:
        return 0.0
    n_types = len(devices_per_type)
    if n_types == 1:
        return sum(row[0] for row in group_type_ms) / devices_per_type[0]
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    t_var = solver.NumVar(0.0, solver.infinity(), "T")
    x = [[solver.NumVar(0.0, 1.0, f"x{g}_{t}") for t in range(n_types)] for g in range(len(group_type_ms))]
    for g, row in enumerate(x):
        solver.Add(sum(row) == 1.0)
    for t in range(n_types):
        solver.Add(sum(x[g][t] * group_type_ms[g][t] for g in range(len(x))) <= devices_per_type[t] * t_var)
    solver.Minimize(t_var)
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:
        raise RuntimeError(f"ideal bound: GLOP ended with status {status}")
    return t_var.solution_value()


def ideal_bound(gg, cluster, cost, batch: int) -> IdealBound:
    """The lower bound for `gg` at global batch `batch` on `cluster` under `cost` (see the module docstring)."""
    types: dict[str, tuple[object, int]] = {}
    for d in cluster.devices:
        dev_type, n = types.get(d.type.name, (d.type, 0))
        types[d.type.name] = (dev_type, n + 1)
    names = tuple(types)
    c = tuple(tuple(cost.group_fwd_ms(g.id, types[t][0], batch) + cost.group_bwd_ms(g.id, types[t][0], batch)
                    for t in names) for g in gg.groups)
    counts = tuple(types[t][1] for t in names)
    return IdealBound(min_makespan_ms([list(r) for r in c], list(counts)), names, counts, c)

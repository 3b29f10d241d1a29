"""Compute bounds on the iteration time, from the cost model itself.

The suite's "ideal" column is `compute_bound` (issue 21): T_d = the whole model's forward + backward at the full
batch on device d, bound = 1 / sum_d (1 / T_d). `flops_bound_ms` is 3 x forward FLOPs x batch / summed FP32
peaks (a bound only without convolutions). `ideal_bound` below is the per-group LP, never above `compute_bound`:

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

`latency_floor_ms` bounds what those leave out, the dependencies: however a plan splits rows or shards weights, a
group's forward on any device costs at least its kernel launches L_g (`launch_floor_ms` of the cost model, min over
device types), and so does its backward. One micro-batch runs the forwards along a path of the group graph in
order, then the backwards back along it (the simulator's backward of a group waits for its consumers'), so the
iteration takes at least max over paths P of sum_{g in P} 2 L_g. Small models are bound by this, not by their
FLOPs: their per-device slices are launch-bound.
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


@dataclass(frozen=True)
class ComputeBound:
    """The issue-21 compute bound: per device, T_d = the whole model's forward + backward at the full batch on d
    (ms), and the bound 1 / sum_d (1 / T_d) (ms)."""

    iteration_ms: float
    device_ms: tuple[float, ...]  # T_d per device, topology order


def harmonic_bound_ms(device_ms) -> float:
    """1 / sum_d (1 / T_d): the time the devices take when each does a share of the work in proportion to its
    speed (1 / T_d), ms. Devices with T_d = 0 make the bound 0.

    >>> harmonic_bound_ms([6.0, 3.0])  # rates 1/6 + 1/3 per ms
    2.0
    """
    if any(t <= 0 for t in device_ms):
        return 0.0
    return 1.0 / sum(1.0 / t for t in device_ms)


def compute_bound(gg, cluster, cost, batch: int) -> ComputeBound:
    """The compute bound of `gg` at global batch `batch` on `cluster` under `cost`.

    T_d = sum_g group_fwd_ms(g, type_d, B) + group_bwd_ms(g, type_d, B): every row of every group at the cost
    model's precision (the training config's; plans choose fp32 only today). If device d computes a fraction f_d
    of the work (sum_d f_d = 1) and a slice costs no less per row than the whole batch (time per row
    non-increasing in rows, as in the roofline and profiled models), d is busy at least f_d T_d, so the
    iteration is at least min over f of max_d f_d T_d = 1 / sum_d (1 / T_d) (all f_d T_d equal). This assumes
    the work of one device cannot be done relatively faster elsewhere group by group; `ideal_bound`'s LP drops
    that assumption and is never above this bound. Ignores communication, memory, the optimizer update and
    dependencies.
    """
    per_type: dict[str, float] = {}
    for d in cluster.devices:
        if d.type.name not in per_type:
            per_type[d.type.name] = sum(cost.group_fwd_ms(g.id, d.type, batch) + cost.group_bwd_ms(g.id, d.type, batch)
                                        for g in gg.groups)
    device_ms = tuple(per_type[d.type.name] for d in cluster.devices)
    return ComputeBound(harmonic_bound_ms(device_ms), device_ms)


def flops_bound_ms(gg, cluster, batch: int) -> float:
    """3 x forward FLOPs x batch / summed FP32 peaks, ms: a bound for models without convolutions (no Winograd
    factor) in fp32. Forward FLOPs per sample from the group graph (per-row plus fixed / batch).

    Units: peak_tflops x 1e9 = FLOP per ms."""
    fwd = sum(g.fwd_flops_per_row * batch + g.fwd_flops_fixed for g in gg.groups)
    peak_flop_per_ms = sum(d.type.peak_tflops for d in cluster.devices) * 1e9
    return 3.0 * fwd / peak_flop_per_ms


def latency_floor_ms(gg, cluster, cost) -> float:
    """max over paths P of the group graph of sum_{g in P} 2 L_g, L_g = min over device types of the cost model's
    `launch_floor_ms(g, type)` (module docstring), ms; 0 when the cost model has no floor.

    >>> from types import SimpleNamespace as NS
    >>> gg = NS(groups=[NS(id=i) for i in range(4)], edges=[NS(src=0, dst=1), NS(src=0, dst=2), NS(src=1, dst=3),
    ...         NS(src=2, dst=3)])
    >>> cost = NS(launch_floor_ms=lambda g, t: [1.0, 5.0, 2.0, 1.0][g] * (2 if t.name == "slow" else 1))
    >>> cluster = NS(devices=[NS(type=NS(name="slow")), NS(type=NS(name="fast"))])
    >>> latency_floor_ms(gg, cluster, cost)  # 0 -> 1 -> 3 on the fast type: 2 x (1 + 5 + 1)
    14.0
    """
    fn = getattr(cost, "launch_floor_ms", None)
    if fn is None or not gg.groups:
        return 0.0
    types = list({d.type.name: d.type for d in cluster.devices}.values())
    weight = {g.id: 2.0 * min(fn(g.id, t) for t in types) for g in gg.groups}
    succ: dict[int, list[int]] = {g: [] for g in weight}
    preds: dict[int, list[int]] = {g: [] for g in weight}
    waiting = dict.fromkeys(weight, 0)  # per group, its consumers not yet given their longest path
    for e in gg.edges:
        succ[e.src].append(e.dst)
        preds[e.dst].append(e.src)
        waiting[e.src] += 1
    ready = [g for g, n in waiting.items() if n == 0]  # sinks first, then back through the graph
    longest: dict[int, float] = {}
    while ready:
        g = ready.pop()
        longest[g] = weight[g] + max((longest[j] for j in succ[g]), default=0.0)
        for p in preds[g]:
            waiting[p] -= 1
            if waiting[p] == 0:
                ready.append(p)
    return max(longest.values())

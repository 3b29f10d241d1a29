"""Tensor-shard candidates for the search (issue 22): which groups to shard, over which grid, at which shares.

A candidate rewrites some groups of a **base** strategy (a baseline, a memory variant or a pipeline) as sharded
decisions (`tag.strategy.shard.Shard`) and leaves every other group as the base has it; the simulator judges it
against every other plan kind (`tag.search.planner`), as it judges pipelines.

* **Splits** (`group_shards`): per group with parameters, the first of SPLIT_PREFERENCE that
  `tag.graph.shardable.analyse_group` accepts: ``column`` (one weight op, its output left split and gathered by
  its consumer: half the bytes of an all-reduce), ``heads`` (attention, or the Megatron pair: one all-reduce),
  ``row`` (one all-reduce of the output).
* **Grids** (`grids_over`, `machine_grids`): replicas inside one machine (fast links), k = 2, 4, 8 devices each.
  Over the base's devices of a group, every machine's devices are cut into replicas of k (k dividing each
  machine's count): in topology order, and strided (replica r takes devices r, r + R, ... of its machine) so that a
  machine listing fast devices before slow ones pairs them in every replica, and uneven shares pay. One replica on
  all of one machine's devices (R = 1) is a grid too: a huge layer on the machine that holds it best, without a
  gradient sync across machines.
* **Rows**: a replica takes the rows its devices had in the base (the sum; a pipeline's multiples of m stay so);
  on a one-replica grid every device takes the whole batch.
* **Shares** (`shard_parts`): the candidate is simulated once at even shares; then one linear program per grid
  (`tag.search.shard_ratios`; a pipelined base has one grid per stage) over the summed work of the grid's groups:
  work_ms = the sharded ops' share of the group's forward and backward on the device at its replica's rows (by
  FLOPs), fixed_ms = the rest; sliced bytes = the sliced parameters x (weight + gradient + optimizer state) per
  element; whole bytes = the device's simulated peak at even shares less its even share of the sliced bytes;
  usable = 0.92 x memory. Shares are then whole units of every sharded pair (heads exactly).

The candidates (`shard_candidates`), per base: every shardable group sharded on each grid (``<base>+shard-k<k>``,
``-strided``, ``-m<machine>``), and the MAX_TOP_GROUPS groups with the most parameter bytes sharded alone on each
grid (``<base>+shard-g<g>-...``). Refinement then moves single groups in and out of sharding
(`shard_like_neighbour`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

import numpy as np

from tag.graph.groups import group_has_params
from tag.graph.shardable import NotShardable, analyse_group
from tag.search.shard_ratios import RatioProblem, solve_ratios, whole_unit_ratios
from tag.strategy import AUTO, Decision, Strategy
from tag.strategy.shard import Shard, exact_units, shard_sizes

SPLIT_PREFERENCE = ("column", "heads", "row")
DEGREES = (2, 4, 8)  # devices per replica tried
MAX_TOP_GROUPS = 2  # groups with the most parameter bytes also tried sharded alone
SHARD_MAX_DEVICES = 128  # shards are not searched above this many devices (as pipelines)


@dataclass(frozen=True)
class GroupShard:
    """How one group shards: `split`; the pairs' units (`units`, the least of them `min_units`); `exact_units`:
    the gcd of the units that must split exactly (heads), 0 when none; `work_share`: the fraction of the group's
    per-row FLOPs (forward + backward) in ops that do a device's share; `sliced_param_bytes`: bytes of the sliced
    parameters (whole)."""

    group: int
    split: str
    min_units: int
    exact_units: int
    work_share: float
    sliced_param_bytes: float


def group_shards(gg) -> dict[int, GroupShard]:
    """group id -> its GroupShard, for every group with parameters that one split of SPLIT_PREFERENCE applies to."""
    graph = gg.graph
    out = {}
    for g in gg.groups:
        if not group_has_params(gg, g.id):
            continue
        for split in SPLIT_PREFERENCE:
            try:
                lay = analyse_group(graph, g.op_ids, split)
            except NotShardable:
                continue
            exact = [u for u, e in zip(lay.units, lay.exact) if e]
            flops = {i: graph.ops[i].fwd_flops_per_row + graph.ops[i].bwd_flops_per_row for i in g.op_ids}
            total = sum(flops.values())
            share = sum(flops[i] for i in lay.sharded_ops if i in flops) / total if total > 0 else 1.0
            sliced = sum(_tensor_bytes(graph, p.name) for p in {p.name: p for p in lay.params}.values())
            out[g.id] = GroupShard(g.id, split, min(lay.units), reduce(math.gcd, exact, 0), share, sliced)
            break
    return out


def _tensor_bytes(graph, name: str) -> float:
    t = graph.tensors[name]
    return float(np.prod(t.shape or ())) * np.dtype(t.dtype).itemsize


def _by_machine(cluster, devices) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for d in sorted(devices):
        out.setdefault(cluster.devices[d].machine, []).append(d)
    return out


def grids_over(cluster, devices, k: int) -> dict[str, tuple[tuple[int, ...], ...]]:
    """name -> replicas of k devices each inside one machine covering `devices` (device indices): ``k<k>`` in
    topology order and ``k<k>-strided`` (replica r of a machine with R_m replicas: its devices r, r + R_m, ...)
    when that differs; {} unless k divides every machine's count.

    >>> from types import SimpleNamespace as N
    >>> c = N(devices=[N(machine="a")] * 4 + [N(machine="b")] * 4)
    >>> grids_over(c, range(8), 2)
    {'k2': ((0, 1), (2, 3), (4, 5), (6, 7)), 'k2-strided': ((0, 2), (1, 3), (4, 6), (5, 7))}
    """
    machines = _by_machine(cluster, devices)
    if any(len(ds) % k for ds in machines.values()):
        return {}
    plain, strided = [], []
    for ds in machines.values():
        n_rep = len(ds) // k
        plain += [tuple(ds[r * k:(r + 1) * k]) for r in range(n_rep)]
        strided += [tuple(ds[r::n_rep]) for r in range(n_rep)]
    out = {f"k{k}": tuple(plain)}
    if strided != plain:
        out[f"k{k}-strided"] = tuple(strided)
    return out


def machine_grids(cluster) -> dict[str, tuple[tuple[int, ...], ...]]:
    """name -> one replica of all of one machine's devices (``m<machine>``), for each machine of two or more."""
    return {f"m{m}": (tuple(ds),) for m, ds in _by_machine(cluster, range(cluster.n_devices)).items() if len(ds) > 1}


def sharded_decision(base: Decision, replicas, ratios, split: str, batch: int, has_params: bool) -> Decision | None:
    """The decision of a group sharded on `replicas` with `ratios`: each replica's rows on each of its devices (the
    rows its devices had in `base`; the whole batch when one replica); sync AUTO when more than one replica holds
    parameters. None when a replica would get no rows."""
    n = len(base.rows)
    rows = [0] * n
    for rep in replicas:
        r = batch if len(replicas) == 1 else sum(base.rows[d] for d in rep)
        if r <= 0:
            return None
        for d in rep:
            rows[d] = r
    if len(replicas) > 1 and sum(rows[rep[0]] for rep in replicas) != batch:
        return None
    sync = AUTO if len(replicas) > 1 and has_params else None
    return Decision(tuple(rows), sync, shard=Shard(split, tuple(replicas), tuple(ratios)))


def grid_problem(gg, cluster, cost, training, shards: list[GroupShard], replicas, rows_of, peak_gb=None,
                 even=None) -> RatioProblem:
    """The shares' LP (module docstring) of the groups `shards` on `replicas`; `rows_of[r]`: replica r's rows;
    `peak_gb`: device id -> simulated peak at the shares `even` (None: no memory constraint)."""
    from tag.cost.optimizer import state_bytes_per_param

    per_elem = 2.0 + state_bytes_per_param(training.optimizer) / 4.0  # weight, gradient, optimizer state (fp32)
    sliced = sum(s.sliced_param_bytes for s in shards) * per_elem
    work, fixed, sl, whole, usable = [], [], [], [], []
    for r, rep in enumerate(replicas):
        w_row, f_row = [], []
        for d in rep:
            dt = cluster.devices[d].type
            t = [cost.group_fwd_ms(s.group, dt, rows_of[r]) + cost.group_bwd_ms(s.group, dt, rows_of[r]) for s in shards]
            w_row.append(sum(x * s.work_share for x, s in zip(t, shards)))
            f_row.append(sum(x * (1 - s.work_share) for x, s in zip(t, shards)))
        work.append(tuple(w_row))
        fixed.append(tuple(f_row))
        if peak_gb is not None:
            sl.append(tuple(sliced for _ in rep))
            whole.append(tuple(max(0.0, peak_gb[cluster.devices[d].id] * 1e9 - even[j] * sliced)
                               for j, d in enumerate(rep)))
            usable.append(tuple(cluster.devices[d].type.usable_memory_bytes for d in rep))
    if peak_gb is None:
        return RatioProblem(tuple(work), tuple(fixed))
    return RatioProblem(tuple(work), tuple(fixed), tuple(sl), tuple(whole), tuple(usable))


def _units(shards: list[GroupShard]) -> tuple[int, bool]:
    """(units every group's shares are counted in, whether they must be exact): the gcd of the exact (heads)
    units when any, else the least of the groups' units."""
    exact = reduce(math.gcd, [s.exact_units for s in shards if s.exact_units], 0)
    return (exact, True) if exact else (min(s.min_units for s in shards), False)


def even_ratios(k: int, shards: list[GroupShard]) -> tuple[float, ...] | None:
    """Even shares in whole units of `shards` (`_units`): n_j = units // k, the leftover units to the first
    positions; None when there are fewer units than positions.

    >>> even_ratios(3, [GroupShard(0, "heads", 6, 6, 1.0, 0.0)])
    (0.3333333333333333, 0.3333333333333333, 0.3333333333333333)
    """
    units, _ = _units(shards)
    if units < k:
        return None
    base, left = divmod(units, k)
    return tuple((base + (1 if j < left else 0)) / units for j in range(k))


def apply_grid(gg, base: Strategy, groups: list[int], replicas, ratios, shards: dict[int, GroupShard]) -> Strategy | None:
    """`base` with `groups` sharded on `replicas` at `ratios` (None when a group's decision cannot be built)."""
    batch = gg.graph.batch_size
    decisions = list(base.decisions)
    for g in groups:
        if len(replicas) > 1 and not gg.groups[g].splittable:
            return None
        dec = sharded_decision(base.decisions[g], replicas, ratios, shards[g].split, batch, group_has_params(gg, g))
        if dec is None:
            return None
        decisions[g] = dec
    return base.with_decisions(decisions)


def shard_parts(gg, cluster, cost, training, base: Strategy, parts, shards: dict[int, GroupShard],
                result_fn) -> Strategy | None:
    """`base` with each part (groups, replicas) sharded: every part at even shares, simulated once (`result_fn`);
    then each part at its LP's whole-unit shares under each device's memory, read from that simulation's peaks
    (module docstring). The strategy at the LP's shares (a part whose LP finds none, or whose shares cannot be
    built, stays at even shares), or at even shares when no part's LP moved them; a part whose even shares cannot
    be built stays as `base` has it; None when no part can be built.

    A pipelined base has one part per stage (its groups on its devices): one simulation at even shares serves every
    stage's LP (a device's peak is mostly its own stage's groups'; the LP's memory term is an estimate either way)."""
    first, built = even_parts(gg, base, parts, shards)
    if first is None:
        return None
    return _at_lp_shares(gg, cluster, cost, training, base, first, built, shards, result_fn)


def _at_lp_shares(gg, cluster, cost, training, base: Strategy, first: Strategy, built, shards, result_fn,
                  peak_fn=None) -> Strategy:
    """`first` (`even_parts` of `base`, whose parts are `built`) simulated, then each part at its LP's shares where
    they can be built (`shard_parts`); `first` itself when no part's shares moved. `result_fn(first)` may be None
    (`shard_candidates`: ruled out without a simulation); the LP then reads `peak_fn(first)`, the peaks per device
    id (GB) its simulation would report."""
    res = result_fn(first)
    peak_gb = res.peak_memory_gb if res is not None else peak_fn(first)
    decisions, moved = list(first.decisions), False
    for groups, replicas, even in built:
        ratios = _lp_ratios(gg, cluster, cost, training, first, groups, replicas, shards, peak_gb, even)
        lp = apply_grid(gg, base, groups, replicas, ratios, shards) if ratios is not None else None
        if lp is not None:  # a sharded decision is built from base's rows; the parts' groups are disjoint
            moved = True
            for g in groups:
                decisions[g] = lp.decisions[g]
    return first.with_decisions(decisions) if moved else first


def even_parts(gg, base: Strategy, parts, shards: dict[int, GroupShard]) -> tuple[Strategy | None, list]:
    """(`base` with every part (groups, replicas) that can be sharded at even shares (`even_ratios`) so sharded,
    [(groups, replicas, even shares) of those parts]); (None, []) when none can."""
    s, built = base, []
    for groups, replicas in parts:
        even = even_ratios(len(replicas[0]), [shards[g] for g in groups])
        nxt = apply_grid(gg, s, groups, replicas, even, shards) if even is not None else None
        if nxt is not None:
            s = nxt
            built.append((groups, replicas, even))
    return (s, built) if built else (None, [])


def _lp_ratios(gg, cluster, cost, training, first: Strategy, groups, replicas, shards, peak_gb, even):
    """The LP's whole-unit shares of `groups` on `replicas` in `first` (sharded there at `even`, whose simulated
    peaks are `peak_gb`); None when the LP finds none or keeps `even`."""
    chosen = [shards[g] for g in groups]
    rows_of = [first.decisions[groups[0]].rows[rep[0]] for rep in replicas]
    problem = grid_problem(gg, cluster, cost, training, chosen, replicas, rows_of, peak_gb, even)
    sol = solve_ratios(problem)
    if sol is None:
        return None
    units, exact = _units(chosen)
    whole = whole_unit_ratios(problem, sol.ratios, units, exact)
    return None if whole is None or whole.ratios == even else whole.ratios


def _grids_for(cluster, devices, machine: dict) -> dict:
    out = {}
    for k in DEGREES:
        out.update(grids_over(cluster, devices, k))
    return {**out, **machine}


def shard_candidates(gg, cluster, cost, training, bases: dict[str, Strategy], result_fn,
                     ahead=None, peak_fn=None) -> dict[str, Strategy]:
    """name -> sharded strategy over every base (module docstring), each even-share strategy scored through
    `result_fn` (the search's evaluator, so the best of them enters its best-ever) before its LP. Pipelined bases
    shard within each stage's devices only (grids over a group's own devices; no one-machine grid).
    `ahead(strategies)`: told first the even-share strategies in the order they are scored (`Evaluator.ahead`:
    other cores simulate them meanwhile; no result changes). `result_fn` may return None for a strategy it rules
    out without simulating (a floor, `tag.search.search_start`); its LP then reads `peak_fn(strategy)`."""
    shards = group_shards(gg)
    if not shards:
        return {}
    jobs = [(f"{bname}+{name}", base, *even_parts(gg, base, parts, shards)) for bname, base in bases.items()
            for name, parts in candidate_parts(cluster, base, shards)]
    jobs = [job for job in jobs if job[2] is not None]  # (name, base, first, built); None: no part can be built
    if ahead is not None:
        ahead([first for _, _, first, _ in jobs])
    return {name: _at_lp_shares(gg, cluster, cost, training, base, first, built, shards, result_fn, peak_fn)
            for name, base, first, built in jobs}


def candidate_parts(cluster, base: Strategy, shards: dict[int, GroupShard]):
    """(name, parts) of every shard candidate on `base`, in order (`shard_parts` builds each): every shardable group
    on one grid per device set (its groups' base devices: one part per set; the grid names agree), ``shard-<grid>``;
    then each of the MAX_TOP_GROUPS groups with the most sliced bytes alone on each grid of its devices (and,
    unpipelined, on each one-machine grid), ``shard-g<g>-<grid>``."""
    by_devices: dict[tuple, list[int]] = {}
    for g in shards:
        by_devices.setdefault(base.decisions[g].devices, []).append(g)
    names: dict[str, list[tuple]] = {}
    for devs, groups in by_devices.items():
        for gname, reps in _grids_for(cluster, devs, {}).items():
            names.setdefault(gname, []).append((groups, reps))
    for gname, parts in names.items():
        yield f"shard-{gname}", parts
    top = sorted(shards, key=lambda g: (-shards[g].sliced_param_bytes, g))[:MAX_TOP_GROUPS]
    machine = {} if base.pipeline is not None else machine_grids(cluster)
    for g in top:
        for gname, reps in _grids_for(cluster, base.decisions[g].devices, machine).items():
            yield f"shard-g{g}-{gname}", [([g], reps)]


def shard_like_neighbour(strategy: Strategy, g: int, shards: dict[int, GroupShard], splittable: bool,
                         has_params: bool) -> list[Decision]:
    """Refinement moves for group g: sharded as a neighbouring group (g - 1 or g + 1) is, on its grid, rows and
    shares, when g shards (`shards`), the shares give each position a unit of g (exactly, for heads) and g may take
    several replicas' rows (`splittable`) if there are several; and, when g is sharded, unsharded on its own row map
    over the batch (`Decision.batch_rows`: each replica's rows on its first device)."""
    out = []
    dec = strategy.decisions[g]
    for nb in (g - 1, g + 1):
        if not 0 <= nb < len(strategy.decisions):
            continue
        other = strategy.decisions[nb]
        if other.shard is None or g not in shards or dec.shard == other.shard:
            continue
        if len(other.shard.replicas) > 1 and not splittable:
            continue
        units, exact = _units([shards[g]])
        if (exact and not exact_units(units, other.shard.ratios)) or min(shard_sizes(units, other.shard.ratios)) < 1:
            continue
        sync = AUTO if len(other.shard.replicas) > 1 and has_params else None
        out.append(Decision(other.rows, sync, shard=Shard(shards[g].split, other.shard.replicas, other.shard.ratios)))
    if dec.shard is not None:
        rows = dec.batch_rows
        rep = sum(1 for x in rows if x > 0) > 1
        out.append(Decision(rows, AUTO if rep and has_params else None))
    return out

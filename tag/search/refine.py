"""Local refinement: coordinate descent over neighbouring decisions, one group at a time.

Each sweep first tries every other gradient bucket size (`BUCKET_SIZES_MB`, DisCo's tensor fusion as a plan-level
choice), then moving rows for every group on the most common row map at once
(`shared_shift_neighbours`); then, for each group (in the search order), every candidate of the space,
the decisions of the groups next to it in topological order (so runs of groups can share a row map and
skip re-partition transfers), and row shifts of the current row map (move one row, or about 5% of the
rows, between devices adjacent in topology order) and its memory decisions (`tag.search.memory_pass`: the ZeRO stage
one up or down, recomputation toggled), keeping a change only if the simulated value improves. The strategy-level
moves also set one ZeRO stage, or recomputation on or off, for every group of a pipeline stage (of the whole plan
without a pipeline) at once. Row moves keep a group's ZeRO stage and recomputation. When shards are searched
(`SearchSpace.shards`), a group may also take a neighbouring group's shard grid and shares, or a sharded group
drop its shard (`tag.search.shard_search.shard_like_neighbour`); row shifts leave sharded groups alone (their rows
follow their grid).
It sweeps until a sweep gains less than 0.1% (`MIN_SWEEP_GAIN`) or the simulation budget is spent (or, as a
safety net only, the wall-clock cap is reached). Deterministic: fixed order, strict improvement, counted work. A move
whose compute alone is slower than the current plan (`tag.search.evaluate.Evaluator.can_exceed`, when the evaluator
has compute floors) is not simulated: it could not be kept, and it counts as a simulation, so the path is the same.

A pipelined start keeps its pipeline: rows move in multiples of its micro-batch count m (each replica keeping at
least m), and a decision that would put a group's rows outside its stage or off a multiple of m
(`tag.search.space.fits_pipeline`) is never tried. Without a pipeline the moves are exactly those above.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from tag.search.budget import WallCap
from tag.search.evaluate import Evaluator
from tag.search.memory_pass import carry_memory, memory_neighbours, stage_memory_neighbours
from tag.strategy.memory_decisions import max_zero
from tag.search.shard_search import shard_like_neighbour
from tag.search.space import SearchSpace, fits_pipeline
from tag.strategy import AUTO, Decision, Strategy

# Bucket caps (MiB) the refinement tries: 0 = one bucket per group; 25 = PyTorch DDP's default bucket_cap_mb;
# 64 and 128 = Horovod's fusion buffer (HOROVOD_FUSION_THRESHOLD 64 MiB, 128 MiB in later releases).
BUCKET_SIZES_MB = (0.0, 1.0, 5.0, 25.0, 64.0, 128.0, 512.0)
MAX_PAIRWISE_SHIFT_DEVICES = 8  # larger replica sets shift rows only across machine/type boundaries
MIN_SWEEP_GAIN = 1e-3  # stop refining when a whole sweep gains less (value units: ln of speedup)


def row_shift_neighbours(dec: Decision, device_class: Sequence | None = None,
                         max_pairwise: int = MAX_PAIRWISE_SHIFT_DEVICES, unit: int = 1) -> list[Decision]:
    """Decisions that move a few rows between devices adjacent (in topology order) within the replica set.

    Rows move in multiples of `unit` (a pipeline's micro-batch count m: every row count stays a multiple of m and
    every replica keeps at least m rows): `unit` and about 5% of the rows rounded to a multiple of it.

    With `device_class` (a label per device, e.g. (machine, type)) and more than `max_pairwise` replicas,
    only adjacent pairs whose labels differ are shifted (inside a run of like devices a shift only unbalances
    them), and `class_shift_neighbours` adds moves of one row per device between whole device types.
    """
    devs = dec.devices
    if len(devs) < 2 or dec.shard is not None:  # a sharded group's rows follow its grid (shard moves change it)
        return []
    total = sum(dec.rows)
    steps = sorted({unit, unit * max(1, round(0.05 * total / len(devs) / unit))})
    pairs = list(zip(devs, devs[1:]))
    big = device_class is not None and len(devs) > max_pairwise
    if big:
        pairs = [(a, b) for a, b in pairs if device_class[a] != device_class[b]]
    out = []
    for a, b in pairs:
        for src, dst in ((a, b), (b, a)):
            for k in steps:
                if dec.rows[src] - k < unit:
                    continue
                rows = list(dec.rows)
                rows[src] -= k
                rows[dst] += k
                out.append(replace(dec, rows=tuple(rows)))
    if big:
        out += class_shift_neighbours(dec, [c[-1] if isinstance(c, tuple) else c for c in device_class], unit)
    return out


def class_shift_neighbours(dec: Decision, device_type: Sequence, unit: int = 1) -> list[Decision]:
    """Decisions that take `unit` rows (1; a pipeline's m) from every replica of one device type (those with more
    than `unit` rows) and hand them out `unit` each, in topology order, to the replicas of another type (round
    robin if fewer).

    >>> [d.rows for d in class_shift_neighbours(Decision((3, 3, 2)), ["a", "a", "b"])]
    [(2, 2, 4), (4, 3, 1)]
    """
    devs = dec.devices
    by_type: dict = {}
    for d in devs:
        by_type.setdefault(device_type[d], []).append(d)
    out = []
    for ta, src in by_type.items():
        for tb, dst in by_type.items():
            if ta == tb:
                continue
            give = [d for d in src if dec.rows[d] > unit]
            if not give:
                continue
            rows = list(dec.rows)
            for i, d in enumerate(give):
                rows[d] -= unit
                rows[dst[i % len(dst)]] += unit
            out.append(replace(dec, rows=tuple(rows)))
    return out


def refine(space: SearchSpace, ev: Evaluator, start: Strategy, *, max_simulations: int = 4000,
           cap: WallCap | None = None, min_sweep_gain: float = MIN_SWEEP_GAIN) -> Strategy:
    """Improve `start` by strict-improvement coordinate descent; returns the best strategy reached.

    Stops when a sweep over all groups raises the value by less than `min_sweep_gain` (the value is
    ln(speedup) for plans that fit, so 1e-3 is a 0.1% gain) or after `max_simulations` new simulations;
    earlier only if the wall-clock safety `cap` is reached (then `cap.hit`)."""
    current, cur_v = start, ev.value(start)
    budget_end = ev.simulations + max_simulations
    n_groups = len(current.decisions)
    pl = start.pipeline
    unit = pl.micro_batches if pl is not None else 1
    keeps = (lambda g, dec: True) if pl is None else (lambda g, dec: fits_pipeline(dec, g, pl))  # noqa: E731

    def out_of_budget() -> bool:
        return ev.simulations >= budget_end or (cap is not None and cap.reached())

    improved = True
    while improved and not out_of_budget():
        improved = False
        sweep_start_v = cur_v
        whole = (bucket_neighbours(current) + shared_shift_neighbours(current, space.device_class, unit)
                 + stage_memory_neighbours(current, space.has_params))
        ev.ahead(whole)
        for cand in whole:
            if out_of_budget():
                return current
            if not ev.can_exceed(cand, cur_v):  # its compute alone is slower than the current plan
                continue
            v = ev.value(cand)
            if v > cur_v + 1e-12:
                current, cur_v, improved = cand, v, True
        for gid in space.order:
            mine = current.decisions[gid]
            tries = list(space.candidates[gid])
            for nb in (gid - 1, gid + 1):
                if 0 <= nb < n_groups and (space.splittable[gid] or not current.decisions[nb].replicated):
                    tries.append(with_rows_of(current.decisions[nb], space.has_params[gid]))
            tries = [carry_memory(space.has_params[gid], mine, t) for t in tries]
            tries += row_shift_neighbours(mine, space.device_class, unit=unit)
            tries += memory_neighbours(mine, space.has_params[gid], max_zero(current.pipeline is not None))
            if space.shards:
                tries += shard_like_neighbour(current, gid, space.shards, space.splittable[gid],
                                              space.has_params[gid])
            if ev.looks_ahead:
                ev.ahead(_moves(current, gid, tries, keeps))
            for i, dec in enumerate(tries):
                if dec == current.decisions[gid] or not keeps(gid, dec):
                    continue
                if out_of_budget():
                    return current
                cand = current.replace(gid, dec)
                if not ev.can_exceed(cand, cur_v):
                    continue
                v = ev.value(cand)
                if v > cur_v + 1e-12:
                    current, cur_v, improved = cand, v, True
                    if ev.looks_ahead:  # the rest now move from here
                        ev.ahead(_moves(current, gid, tries[i + 1:], keeps))
        if cur_v - sweep_start_v < min_sweep_gain:
            break
    return current


def _moves(current: Strategy, gid: int, tries: Sequence[Decision], keeps) -> list[Strategy]:
    """The strategies `refine` tries for group `gid` from `current`, in its order (for `Evaluator.ahead`)."""
    return [current.replace(gid, dec) for dec in tries if dec != current.decisions[gid] and keeps(gid, dec)]


def bucket_neighbours(strategy: Strategy, sizes_mb: Sequence[float] = BUCKET_SIZES_MB) -> list[Strategy]:
    """The strategy with each other bucket cap of `sizes_mb` (decisions and pipeline unchanged), in that order."""
    return [Strategy(strategy.decisions, float(mb), pipeline=strategy.pipeline)
            for mb in sizes_mb if float(mb) != strategy.bucket_mb]


def shared_shift_neighbours(strategy: Strategy, device_class: Sequence | None = None,
                            unit: int = 1) -> list[Strategy]:
    """Strategies that apply one `row_shift_neighbours` move (rows in multiples of `unit`) to every group on the
    most common replicated row map at once (ties: the first in group order), so a run of groups rebalances
    without re-partition transfers between its members."""
    counts: dict = {}
    for d in strategy.decisions:
        if d.replicated and d.shard is None:
            counts[d.rows] = counts.get(d.rows, 0) + 1
    if not counts:
        return []
    shared = max(counts, key=lambda r: counts[r])  # dicts keep insertion order: ties to the first
    if counts[shared] < 2:
        return []
    out = []
    for nb in dict.fromkeys(n.rows for n in row_shift_neighbours(Decision(shared), device_class, unit=unit)):
        out.append(strategy.with_decisions(replace(d, rows=nb) if d.rows == shared and d.shard is None else d
                                           for d in strategy.decisions))
    return out


def with_rows_of(other: Decision, has_params: bool) -> Decision:
    """A decision with another group's row map over the batch (`Decision.batch_rows`: a sharded group's replica
    rows on their first devices), and a sync method only where this group needs one."""
    if other.shard is not None:
        rows = other.batch_rows
        rep = sum(1 for x in rows if x > 0) > 1
        return Decision(rows, AUTO if rep and has_params else None)
    if not has_params or not other.replicated:
        return Decision(other.rows)
    sync = other.sync or AUTO
    return Decision(other.rows, sync, other.server if sync == "ps" else None)


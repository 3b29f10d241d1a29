"""Memory-feasible starting strategies for the search (not baselines): stage pipelines over device blocks.

When data parallelism cannot fit (every replica holds the whole model's weights and optimizer states),
a plan that fits needs model parallelism. `pipeline_starts` cuts the topological group order into S
contiguous stages and the devices (topology order) into S contiguous blocks — whole machines when
S <= number of machines, else runs of devices — and gives every stage data parallelism inside its block,
with rows balanced by predicted compute time and capped by the memory each device has left for that
stage (`stage_cap_rows`). S = 1 is memory-capped balanced data parallelism over the whole cluster.

Groups are cut two ways for each S: in proportion to the blocks' usable memory (memory demand of a group
= what it keeps at the whole batch by the simulator's terms, `tag.sim.memory.group_lines_bytes`: weights, optimizer
states, gradient, saved activations) and in proportion to the blocks' peak FLOP/s (a group's demand = its
training FLOPs). Every memory figure here is the simulator's model (`tag.sim.memory`). The caller simulates the
starts and keeps the best one that fits.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

from tag.graph.groups import group_has_params
from tag.search.space import balanced_rows, memory_context
from tag.sim.memory import group_lines_bytes, rows_peak_lines
from tag.strategy import AUTO, DEFAULT_BUCKET_MB, Decision, Strategy

MEMORY_SAFETY = 0.97  # fraction of usable memory a start plans to fill (transients the cap does not see)


def contiguous_cuts(demand: Sequence[float], capacity: Sequence[float]) -> list[int] | None:
    """Cut points splitting items (in order) into len(capacity) non-empty contiguous runs whose demand
    shares follow the capacity shares: run b ends at the first item where the cumulative demand reaches
    the cumulative capacity share of blocks 0..b. Returns the S+1 boundaries [0, c1, ..., n], or None
    when there are fewer items than blocks.

    >>> contiguous_cuts([1, 1, 1, 1], [1, 1])
    [0, 2, 4]
    >>> contiguous_cuts([3, 1, 1, 1], [1, 1])
    [0, 1, 4]
    """
    n, s = len(demand), len(capacity)
    if n < s or s < 1:
        return None
    total_d, total_c = float(sum(demand)), float(sum(capacity))
    cuts, acc, c_acc, i = [0], 0.0, 0.0, 0
    for b in range(s - 1):
        c_acc += capacity[b]
        target = total_d * c_acc / total_c if total_c > 0 else 0.0
        # at least one item in this run, and leave one item for each later run
        i = max(i, cuts[-1] + 1)
        acc = sum(demand[:i])
        while i < n - (s - 1 - b) and acc + demand[i] <= target + 1e-9 * max(1.0, total_d):
            acc += demand[i]
            i += 1
        cuts.append(i)
    cuts.append(n)
    return cuts


def contiguous_blocks(weights: Sequence[float], s: int) -> list[list[int]]:
    """Indices 0..n-1 split into s contiguous non-empty runs with sums as equal as `contiguous_cuts` makes them.

    >>> contiguous_blocks([1, 1, 1, 1], 2)
    [[0, 1], [2, 3]]
    """
    cuts = contiguous_cuts(list(weights), [1.0] * s)
    return [list(range(a, b)) for a, b in zip(cuts, cuts[1:])] if cuts else []


def stage_cap_rows(gg, groups: Sequence[int], optimizer: str, ctx=None, device: int = 0) -> tuple[float, float]:
    """(bytes a device needs for the stage regardless of rows, bytes per row): the simulator's peak of `device`
    computing r rows of every group in `groups`, replicated, is at most fixed + per_row x r
    (`tag.sim.memory.rows_line_bytes`: the stage's weights, optimizer states, bucketed gradients and saved
    activations, the largest transient of its walk or the optimizer step's, the activations it receives from
    earlier stages and the gradients from later ones). ctx: `tag.search.space.memory_context` (default: a GPU, `optimizer`, fp32)."""
    return _stage_lines(gg, groups, optimizer, ctx, device).bound()


def _stage_lines(gg, groups: Sequence[int], optimizer: str, ctx=None, device: int = 0):
    ctx = ctx or memory_context(gg, optimizer=optimizer)
    return rows_peak_lines(ctx, list(groups), device, getattr(ctx.training, "precision", "fp32"))


def stage_decisions(gg, cluster, cost, training, batch: int, groups: Sequence[int],
                    block: Sequence[int]) -> list[Decision] | None:
    """Decisions of one stage: its groups data parallel over `block`, rows balanced by compute time within
    each device's memory (None when the block cannot hold the stage at this batch)."""
    n = cluster.n_devices
    dtypes = [d.type for d in cluster.devices]
    cap = _caps(gg, cluster, training, batch, groups)

    memo: dict = {}

    def time_ms(d: int, r: int) -> float:  # devices of one type behave alike: memoised per (type, rows)
        if r <= 0:
            return 0.0
        key = (dtypes[d], r)
        if key not in memo:
            memo[key] = sum(cost.group_fwd_ms(g, dtypes[d], r) + cost.group_bwd_ms(g, dtypes[d], r) for g in groups)
        return memo[key]

    rows = balanced_rows(block, batch, n, time_ms, cap, lambda d: (dtypes[d], cap(d)))
    if rows is None:
        return None
    devs = [d for d in range(n) if rows[d] > 0]
    host = max(devs, key=lambda d: (rows[d], -d))
    whole = tuple(batch if d == host else 0 for d in range(n))
    sync = AUTO
    out = []
    for g in groups:
        r = rows if gg.groups[g].splittable else whole
        rep = sum(1 for x in r if x > 0) > 1
        out.append(Decision(r, sync if rep and group_has_params(gg, g) else None))
    return out


def _caps(gg, cluster, training, batch: int, groups: Sequence[int]):
    """cap(d): the most rows device d can compute of a stage made of `groups`: the simulator's peak of d
    (`tag.sim.memory.rows_peak_lines`, as `stage_cap_rows`) within MEMORY_SAFETY x its usable memory."""
    ctx = memory_context(gg, cluster, training)
    caps: dict = {}

    def cap(d: int) -> int:
        t = cluster.devices[d].type
        if t not in caps:  # devices of one type hold alike
            lines = _stage_lines(gg, groups, training.optimizer, ctx, d)
            caps[t] = lines.max_rows(t.usable_memory_bytes * MEMORY_SAFETY, batch)
        return caps[t]
    return cap


def stage_fits(gg, cluster, training, batch: int, groups: Sequence[int], block: Sequence[int]) -> bool:
    """True when the devices of `block` can hold every row of the stage `groups` (sum of caps >= batch)."""
    cap = _caps(gg, cluster, training, batch, groups)
    return len(block) <= batch and sum(max(0, cap(d)) for d in block) >= batch and all(cap(d) >= 1 for d in block)


def fill_cuts(gg, cluster, training, batch: int, blocks: Sequence[Sequence[int]], reverse: bool = False) -> list[int] | None:
    """Cut points giving each block, in order (last block first when `reverse`), the longest run of the
    remaining groups it can hold; None when the groups do not all fit. Runs may be empty at the end
    (forward) or the start (reverse). Greedy longest-first is exact for feasibility because removing
    groups from a stage never raises its memory."""
    n = gg.n_groups
    order = list(range(len(blocks)))[::-1] if reverse else list(range(len(blocks)))
    pos = n if reverse else 0
    bounds = {}
    for b in order:
        lo_lim, hi_lim = (0, pos) if reverse else (pos, n)
        def ok(k: int) -> bool:  # a run of k groups next to pos fits block b
            grp = range(pos - k, pos) if reverse else range(pos, pos + k)
            return k == 0 or stage_fits(gg, cluster, training, batch, list(grp), blocks[b])
        lo, hi = 0, hi_lim - lo_lim
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid - 1
        bounds[b] = (pos - lo, pos) if reverse else (pos, pos + lo)
        pos = pos - lo if reverse else pos + lo
    if (reverse and pos != 0) or (not reverse and pos != n):
        return None
    return [bounds[0][0]] + [bounds[b][1] for b in range(len(blocks))]


def _block_sets(cluster, s: int) -> list[list[int]]:
    """S contiguous device blocks: whole machines (balanced by usable memory) when S <= machines, else
    runs of devices."""
    machines: dict[str, list[int]] = {}
    for d in cluster.devices:
        machines.setdefault(d.machine, []).append(d.index)
    mlist = list(machines.values())
    if s <= len(mlist):
        mem = [sum(cluster.devices[d].type.usable_memory_bytes for d in m) for m in mlist]
        return [[d for i in blk for d in mlist[i]] for blk in contiguous_blocks(mem, s)]
    mem = [d.type.usable_memory_bytes for d in cluster.devices]
    return contiguous_blocks(mem, s)


def pipeline_starts(gg, cluster, cost, training, batch: int, max_stages: int = 16) -> Iterator[tuple[str, Strategy]]:
    """Stage-pipeline strategies for S = 1 .. min(max_stages, devices, groups), deduplicated, named
    ``pipeline-S-<cut>``: group cuts proportional to the blocks' memory (``mem``) and FLOP/s (``flops``),
    and for S > 1 the greedy longest runs that fit, from the first block (``fill``) or the last
    (``fill-rev``). A variant with a stage its block cannot hold is skipped (so may be every one). Lazy:
    built in increasing S as the caller iterates."""
    n_groups, n = gg.n_groups, cluster.n_devices
    mem_demand = list(_kept_bytes(gg, cluster, training, batch))
    flop_demand = [g.fwd_flops_per_row * batch + g.fwd_flops_fixed + g.bwd_flops_per_row * batch + g.bwd_flops_fixed
                   for g in gg.groups]
    seen: set[Strategy] = set()
    for s in range(1, min(max_stages, n, n_groups) + 1):
        blocks = _block_sets(cluster, s)
        if len(blocks) != s or any(len(b) == 0 for b in blocks):
            continue
        if any(len(b) > batch for b in blocks):
            continue
        cap_mem = [sum(cluster.devices[d].type.usable_memory_bytes for d in b) for b in blocks]
        cap_flops = [sum(cluster.devices[d].type.peak_tflops for d in b) for b in blocks]
        variants = [("mem", contiguous_cuts(mem_demand, cap_mem)), ("flops", contiguous_cuts(flop_demand, cap_flops))]
        if s > 1:
            variants += [("fill", fill_cuts(gg, cluster, training, batch, blocks)),
                         ("fill-rev", fill_cuts(gg, cluster, training, batch, blocks, reverse=True))]
        for label, cuts in variants:
            if cuts is None:
                continue
            decisions: list[Decision] = []
            for b, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
                if hi <= lo:
                    continue
                part = stage_decisions(gg, cluster, cost, training, batch, list(range(lo, hi)), blocks[b])
                if part is None:
                    break
                decisions += part
            if len(decisions) != n_groups:
                continue
            strat = Strategy(tuple(decisions), DEFAULT_BUCKET_MB)
            if strat not in seen:
                seen.add(strat)
                yield f"pipeline-{s}-{label}", strat


def _kept_bytes(gg, cluster, training, batch: int):
    """Per group, the bytes it keeps whole at `batch` rows (`tag.sim.memory.group_lines_bytes`)."""
    fixed, per_row = group_lines_bytes(memory_context(gg, cluster, training), getattr(training, "precision", "fp32"))
    return fixed + per_row * batch


def tape_start(gg, cluster, training, batch: int, fill, into_weight: float = 1.0) -> Strategy | None:
    """Groups laid out on a memory "tape": the devices' usable memory x `fill` (one fraction, or one per
    device), end to end in topology order.

    Walking groups in topological order, each group's rows go to the current device until its share of
    the tape is used (each row costs what the group keeps per row by the simulator's terms, its saved activations,
    plus its inputs and outputs per row x `into_weight`; the first row on a device also costs what it keeps
    regardless of rows: weights, gradient, optimizer states, `tag.sim.memory.group_lines_bytes`), then to the next
    device. A
    group therefore spans consecutive devices with contiguous rows, and the layout fits whenever the
    activations and states fit the tape, however unevenly groups weigh. None when the tape runs out.
    """
    n = cluster.n_devices
    into = [0.0] * gg.n_groups
    for e in gg.edges:
        into[e.dst] += e.bytes_per_row
    fills = list(fill) if isinstance(fill, (list, tuple)) else [fill] * n
    free = [d.type.usable_memory_bytes * f for d, f in zip(cluster.devices, fills)]
    ctx = memory_context(gg, cluster, training)
    kept_fixed, kept_row = group_lines_bytes(ctx, getattr(training, "precision", "fp32"))
    out_row = [g.out_bytes_per_row for g in gg.groups]
    dev, decisions = 0, []
    for g in gg.groups:
        static = float(kept_fixed[g.id])
        per_row = float(kept_row[g.id]) + (into[g.id] + out_row[g.id]) * into_weight
        rows = [0] * n
        left = batch if g.splittable else 0
        if not g.splittable:  # whole on the first device with room for it
            while dev < n and free[dev] < static + per_row * batch:
                dev += 1
            if dev >= n:
                return None
            rows[dev] = batch
            free[dev] -= static + per_row * batch
        while left > 0:
            if dev >= n:
                return None
            fit = batch if per_row <= 0 else int(max(0.0, free[dev] - static) // per_row)
            take = min(left, fit)
            if take <= 0:
                dev += 1
                continue
            rows[dev] = take
            free[dev] -= static + per_row * take
            left -= take
            if left > 0:
                dev += 1
        devs = [d for d in range(n) if rows[d] > 0]
        sync = None
        if len(devs) > 1 and group_has_params(gg, g.id):
            sync = AUTO
        decisions.append(Decision(tuple(rows), sync))
    return Strategy(tuple(decisions), DEFAULT_BUCKET_MB)


def tape_starts(gg, cluster, training, batch: int) -> list[tuple[str, Strategy]]:
    """`tape_start` at a few fills: spread over the whole cluster (the fill where the model's activations
    and one copy of its states take the tape, plus 5%), and 0.95 / 0.9 of usable memory. Named ``tape-F``."""
    need = float(sum(_kept_bytes(gg, cluster, training, batch)))
    have = sum(d.type.usable_memory_bytes for d in cluster.devices)
    out, seen = [], set()
    for fill in (min(0.95, 1.05 * need / have), 0.95, 0.9):
        s = tape_start(gg, cluster, training, batch, fill)
        if s is not None and s not in seen:
            seen.add(s)
            out.append((f"tape-{fill:.2f}", s))
    return out


def fitted_tape(gg, cluster, training, batch: int, simulate_fn, rounds: int = 8) -> Strategy | None:
    """A tape layout corrected by simulation: start from the fill that spreads the model over the whole
    cluster, then after each simulation scale every overflowing device's fill by usable / peak memory (x 0.99)
    and give the freed share to the devices with the most room (lengthen every device's fill when the tape
    runs out), until a layout fits (returned) or `rounds`
    simulations pass (None)."""
    n = cluster.n_devices
    need = float(sum(_kept_bytes(gg, cluster, training, batch)))
    usable = [d.type.usable_memory_bytes for d in cluster.devices]
    fills = [max(0.9, min(0.97, 1.1 * need / sum(usable)))] * n
    for _ in range(rounds):
        s = tape_start(gg, cluster, training, batch, fills, 0.5)
        if s is None:  # the tape ran out: lengthen it where there is still room
            if min(fills) >= 0.99:
                return None
            fills = [min(0.99, f * 1.03) for f in fills]
            continue
        r = simulate_fn(s)
        if not r.oom:
            return s
        ratio = [r.peak_memory_gb[d.id] * 1e9 / u for d, u in zip(cluster.devices, usable)]
        fills = [f * min(1.0, 0.99 / x) if x > 0.99 else min(0.99, f * (1.0 + 0.5 * (0.99 - x))) if x > 0 else f
                 for f, x in zip(fills, ratio)]
    return None


def best_fitting(named: Sequence[tuple[str, Strategy]], simulate_fn) -> tuple[str, Strategy, object] | None:
    """The fastest strategy of `named` whose simulation fits in memory: (name, strategy, SimResult), ties to
    the first listed; None when none fits."""
    best = None
    for name, s in named:
        r = simulate_fn(s)
        if r.oom or not math.isfinite(r.iteration_ms):
            continue
        if best is None or r.iteration_ms < best[2].iteration_ms:
            best = (name, s, r)
    return best

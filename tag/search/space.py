"""The decision space the search explores: per op group, candidate row maps times sync methods.

For the group at hand the candidates are device subsets — all devices, each machine, each device type, the
k fastest devices for this group, single devices (plain placement) — with rows split evenly or balanced
(every chosen device predicted to finish its compute at the same time, within its memory), times the sync
methods that apply (`allreduce`; `hierarchical` when the subset spans machines and shares one; `ps` on the
best-connected device of the subset). The baseline's own decision is always candidate 0, so "keep what
the baseline does" is an action. When the base strategy is a pipeline, a group keeps only the candidates that stay
in its stage with row counts that are multiples of the micro-batch count (`fits_pipeline`). Undecided groups keep the baseline's decision, so every partial state is
a complete strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tag.graph.groups import group_has_params
from tag.search.memory_pass import carry_memory
from tag.sim.context import sim_context
from tag.sim.memory import memory_terms, rows_peak_lines
from tag.strategy import AUTO, Decision, Strategy, TrainingConfig


@dataclass
class SearchSpace:
    order: list[int]  # group ids in the order they are decided
    candidates: list[list[Decision]]  # per group id; candidates[g][0] is the base strategy's decision
    has_params: list[bool]  # per group id: needs a sync method when replicated
    splittable: list[bool]  # per group id: may be replicated over several devices
    device_class: list[tuple[str, str]] | None = None  # per device: (machine, type name), for refinement moves
    shards: dict | None = None  # group id -> `tag.search.shard_search.GroupShard` when shards are searched

    def size(self) -> int:
        """Number of complete strategies in the space (product of candidate counts)."""
        n = 1
        for c in self.candidates:
            n *= len(c)
        return n


def even_rows(devices: Sequence[int], batch: int, n_devices: int) -> tuple[int, ...]:
    """Rows split evenly over `devices`, remainder rows to the first ones (topology order).

    >>> even_rows([0, 2], 5, 3)
    (3, 0, 2)
    """
    rows = [0] * n_devices
    q, r = divmod(batch, len(devices))
    for i, d in enumerate(sorted(devices)):
        rows[d] = q + (1 if i < r else 0)
    return tuple(rows)


def balanced_rows(devices: Sequence[int], batch: int, n_devices: int,
                  time_ms: Callable[[int, int], float], cap_rows: Callable[[int], int] | None = None,
                  device_key: Callable[[int], object] | None = None) -> tuple[int, ...] | None:
    """Rows so the slowest chosen device finishes as early as possible (water filling).

    time_ms(device, rows) must be non-decreasing in rows. Finds the smallest T such that the devices'
    largest row counts with time <= T (and rows <= cap_rows(device)) sum to at least `batch`, then hands
    out the surplus from the devices that would finish last. Every chosen device gets at least one row.
    Returns None if the caps cannot hold the batch. device_key(d), if given, labels devices whose time_ms
    and cap_rows are identical (e.g. the device type and cap), so each label's row counts are found once.
    """
    devices = sorted(devices)
    if batch < len(devices):
        return None
    caps = {d: (cap_rows(d) if cap_rows else batch) for d in devices}
    caps = {d: min(batch, c) for d, c in caps.items()}
    if any(c < 1 for c in caps.values()) or sum(caps.values()) < batch:
        return None
    label = {d: (device_key(d) if device_key else d) for d in devices}
    reps: dict = {}  # label -> (representative device, number of devices)
    for d in devices:
        r, k = reps.get(label[d], (d, 0))
        reps[label[d]] = (r, k + 1)
    memo: dict = {}

    def rows_within(d: int, t: float, lo: int = 0, hi: int | None = None) -> int:
        """The largest r in [0, cap] with time(d, r) <= t, searched in [lo, hi] (a bracket known to hold it)."""
        key = (label[d], t)
        if key in memo:
            return memo[key]
        hi = caps[d] if hi is None else hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if time_ms(d, mid) <= t:
                lo = mid
            else:
                hi = mid - 1
        memo[key] = lo
        return lo

    t_lo, t_hi = 0.0, max(time_ms(r, caps[r]) for r, _ in reps.values())
    # each label's rows_within at t_lo and t_hi: as time is non-decreasing in rows, rows_within is in t, so the
    # rows at any t between them lie between those (the search at mid starts from that bracket, not [0, cap])
    at_lo = {lab: 0 for lab in reps}
    at_hi = {lab: caps[r] for lab, (r, _) in reps.items()}
    for _ in range(50):
        mid = 0.5 * (t_lo + t_hi)
        got = {lab: rows_within(r, mid, at_lo[lab], at_hi[lab]) for lab, (r, _) in reps.items()}
        held = sum(k * got[lab] for lab, (_, k) in reps.items())
        if held >= batch:
            t_hi, at_hi = mid, got
            if held == batch:  # rows_within is monotone in t: any smaller feasible t gives these same rows
                break
        else:
            t_lo, at_lo = mid, got
        if t_hi - t_lo <= 1e-9 * max(1.0, t_hi):
            break
    alloc = {d: max(1, rows_within(d, t_hi, at_lo[label[d]], at_hi[label[d]])) for d in devices}
    # trim surplus from the devices that finish last, keeping >= 1 row each
    surplus = sum(alloc.values()) - batch
    while surplus > 0:
        d = max((d for d in devices if alloc[d] > 1), key=lambda d: (time_ms(d, alloc[d]), d))
        alloc[d] -= 1
        surplus -= 1
    while surplus < 0:  # can only happen when the floor of 1 row bit nothing; give to the fastest finisher
        d = min((d for d in devices if alloc[d] < caps[d]), key=lambda d: (time_ms(d, alloc[d] + 1), d))
        alloc[d] += 1
        surplus += 1
    rows = [0] * n_devices
    for d, r in alloc.items():
        rows[d] = r
    return tuple(rows)


def knot_interpolated_ms(exact_ms: Callable[[int], float], rows: int, batch: int) -> float:
    """exact_ms(rows) at powers of two (and at `batch`), linearly interpolated in between: the group times
    that candidate row maps are balanced with, for log2(batch) + 2 cost-model calls per group and device
    type instead of one per row count. Non-decreasing when exact_ms is; exact at the knots; 0 for no rows.

    >>> knot_interpolated_ms(lambda r: r * r, 3, 8)  # between the knots 2 (4 ms) and 4 (16 ms)
    10.0
    """
    if rows <= 0:
        return 0.0
    lo = 1 << (rows.bit_length() - 1)  # largest power of two <= rows
    if lo == rows or rows >= batch:
        return exact_ms(rows)
    hi = min(2 * lo, batch)
    a, b = exact_ms(lo), exact_ms(hi)
    return a + (b - a) * (rows - lo) / (hi - lo)


def fits_pipeline(decision: Decision, group: int, pipeline) -> bool:
    """True when `decision` keeps `group` inside its stage of `pipeline`: rows only on the stage's devices, each
    count a multiple of the micro-batch count (`tag.strategy.pipeline.micro_rows`)."""
    stage = pipeline.stages[pipeline.stage_of_group()[group]]
    allowed = set(stage.devices)
    m = pipeline.micro_batches
    return all(r == 0 or (d in allowed and r % m == 0) for d, r in enumerate(decision.rows))


def sync_options(cluster, devices: Sequence[int], has_params: bool) -> list[tuple[str | None, int | None]]:
    """The (sync, server) pairs that apply to a replica set."""
    if not has_params or len(devices) < 2:
        return [(None, None)]
    opts: list[tuple[str | None, int | None]] = [(AUTO, None)]  # ring, tree or hierarchical per bucket, by cost
    idx = np.asarray(devices, dtype=np.int64)
    sub = np.asarray(cluster.bandwidth_gbps, dtype=float)[np.ix_(idx, idx)]
    np.fill_diagonal(sub, 0.0)  # the diagonal (a device to itself) is not a link
    total = sub.sum(axis=1) + sub.sum(axis=0)  # each candidate server's bandwidth to and from the others
    server = int(idx[int(np.flatnonzero(total == total.max())[0])])  # ties: the lowest device index
    opts.append(("ps", int(server)))
    return opts


def device_subsets(cluster, per_row_ms: np.ndarray, max_singles: int = 16) -> list[tuple[int, ...]]:
    """Candidate device subsets for one group, deduplicated, in a fixed order.

    per_row_ms[d]: the group's predicted compute time per row on device d (orders the k fastest).
    """
    n = cluster.n_devices
    subsets: list[tuple[int, ...]] = [tuple(range(n))]
    machines: dict[str, list[int]] = {}
    types: dict[str, list[int]] = {}
    for dev in cluster.devices:
        machines.setdefault(dev.machine, []).append(dev.index)
        types.setdefault(dev.type.name, []).append(dev.index)
    if len(machines) > 1:
        subsets += [tuple(v) for v in machines.values()]
    if len(types) > 1:
        subsets += [tuple(v) for v in types.values()]
    fastest = sorted(range(n), key=lambda d: (per_row_ms[d], d))
    k = 2
    while k < n:
        subsets.append(tuple(sorted(fastest[:k])))
        k *= 2
    if n <= max_singles:
        singles = list(range(n))
    else:  # the fastest device of each machine
        singles = [min(v, key=lambda d: (per_row_ms[d], d)) for v in machines.values()]
    subsets += [(d,) for d in singles]
    seen, out = set(), []
    for s in subsets:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


_GENERIC: dict = {}


def memory_context(gg, cluster=None, training=None, optimizer: str = "adam"):
    """The simulator's context whose memory terms the search's row caps read (`tag.sim.context.sim_context`, no
    cost model): of `cluster` and `training`, or without a cluster of two GPUs of one machine (a GPU rank's
    optimizer temporaries) training with `optimizer` in fp32."""
    if cluster is None:
        from tag.topology import parse_topology

        if "cluster" not in _GENERIC:
            _GENERIC["cluster"] = parse_topology({"version": 1, "machines": [
                {"name": "m0", "devices": [{"type": "V100-16GB", "count": 2}]}]}, "generic.json")
        cluster = _GENERIC["cluster"]
    return sim_context(gg, cluster, None, training or TrainingConfig(optimizer))


def kept_bytes_on_devices(ctx, strategy: Strategy) -> np.ndarray:
    """Groups x devices, the bytes each group keeps on each device under `strategy` by the simulator's terms
    (`tag.sim.memory.memory_terms` at the strategy's rows, nothing received): static (weights, optimizer states,
    bucketed gradients) + saved activations + kept gradients."""
    t = memory_terms(ctx, strategy.decisions, None, ctx.training.optimizer,
                     getattr(ctx.training, "precision", "fp32"))
    return t.static + t.saved + t.kept


def group_time_fn(cost, gid: int, dtypes: Sequence, batch: int) -> Callable[[int, int], float]:
    """time_ms(d, rows): forward + backward ms of group `gid` on device d (of types `dtypes`) at `rows` rows,
    interpolated between the cost model's knots (`knot_interpolated_ms`), each knot asked once per device type."""
    memo: dict = {}

    def exact_ms(t, r: int) -> float:
        key = (t, r)
        v = memo.get(key)
        if v is None:
            v = memo[key] = cost.group_fwd_ms(gid, t, r) + cost.group_bwd_ms(gid, t, r)
        return v

    def time_ms(d: int, r: int) -> float:
        return knot_interpolated_ms(lambda x: exact_ms(dtypes[d], x), r, batch)
    return time_ms


def per_row_ms(time_ms: Callable[[int, int], float], n_devices: int, batch: int) -> np.ndarray:
    """ms per row of a group on each device, at the even share batch // n_devices (at least 1 row)."""
    probe = max(1, batch // n_devices)
    return np.array([time_ms(d, probe) / probe for d in range(n_devices)])


def _median_bytes_per_ms(cluster) -> float:
    n = cluster.n_devices
    return float(np.median(cluster.bandwidth_gbps[~np.eye(n, dtype=bool)])) * 1e9 / 8 / 1e3 if n > 1 else 1e12


def _cost_key_ms(per_row: np.ndarray, batch: int, param_bytes: float, med_bytes_per_ms: float) -> float:
    """A group's predicted cost, ms: its whole batch on its fastest device (`per_row_ms`' minimum x batch) + 2 x its
    parameter bytes over the cluster's median bandwidth."""
    return float(per_row.min()) * batch + 2.0 * param_bytes / med_bytes_per_ms


def _order(cost_key: list[float]) -> list[int]:
    """Groups by descending cost key (`_cost_key_ms`), ties by id."""
    return sorted(range(len(cost_key)), key=lambda g: (-cost_key[g], g))


def search_order(gg, cluster, cost, batch: int) -> list[int]:
    """The order groups are decided in, as `build_space(...).order` (`_order`; it does not depend on the base
    strategy), without building any candidate."""
    dtypes = [d.type for d in cluster.devices]
    med = _median_bytes_per_ms(cluster)
    return _order([_cost_key_ms(per_row_ms(group_time_fn(cost, gid, dtypes, batch), cluster.n_devices, batch), batch,
                                group.param_bytes, med) for gid, group in enumerate(gg.groups)])


def build_space(gg, cluster, cost, batch: int, base: Strategy, *, max_singles: int = 16) -> SearchSpace:
    """Candidates for every group and the order groups are decided in (descending predicted cost, `_order`).

    Balanced rows of a group on device d are capped by the simulator's memory model (the cost model's training
    settings; Adam in fp32 without them): the most rows whose peak of the group alone on d, replicated
    (`tag.sim.memory.rows_peak_lines`), fits in the memory the rest of `base` leaves on d (0.97 x usable minus
    what its other groups keep there, `kept_bytes_on_devices`), unless the base itself looks out of memory, in
    which case the group alone in d's usable memory.
    """
    n = cluster.n_devices
    dtypes = [d.type for d in cluster.devices]
    candidates: list[list[Decision]] = []
    cost_key: list[float] = []
    med_bw_bytes_per_ms = _median_bytes_per_ms(cluster)
    ctx = memory_context(gg, cluster, getattr(cost, "training", None))
    precision = getattr(ctx.training, "precision", "fp32")
    own = kept_bytes_on_devices(ctx, base)
    others = own.sum(axis=0) if len(own) else np.zeros(n)
    if np.any(others > np.array([t.usable_memory_bytes for t in dtypes])):
        others = None  # the base looks out of memory: cap each group by itself alone
    for gid, group in enumerate(gg.groups):
        time_ms = group_time_fn(cost, gid, dtypes, batch)
        per_row = per_row_ms(time_ms, n, batch)
        has_params = group_has_params(gg, gid)
        lines: dict = {}  # device type -> the group's PeakLines there
        rows_memo: dict = {}  # device, and (device type, budget) -> the cap: one solve per distinct budget

        def cap_rows(d: int, gid=gid, lines=lines, rows_memo=rows_memo) -> int:
            if d in rows_memo:
                return rows_memo[d]
            t = dtypes[d]
            if t not in lines:
                lines[t] = rows_peak_lines(ctx, [gid], d, precision)
            budget = t.usable_memory_bytes
            if others is not None:  # what the rest of the base strategy keeps on d
                budget = budget * 0.97 - (others[d] - own[gid][d])
            key = (t, float(budget))
            if key not in rows_memo:
                rows_memo[key] = lines[t].max_rows(budget, batch)
            rows_memo[d] = rows_memo[key]
            return rows_memo[d]

        caps = {d: cap_rows(d) for d in range(n)}
        cands: list[Decision] = [base.decisions[gid]]
        seen = {base.decisions[gid]}
        subsets = device_subsets(cluster, per_row, max_singles) if group.splittable else \
            [(d,) for d in (range(n) if n <= max_singles else np.argsort(per_row, kind="stable")[:max_singles])]
        for sub in subsets:
            if len(sub) > batch:
                continue
            row_maps = [even_rows(sub, batch, n)]
            # like devices whose caps hold the even split: balanced rows would be the even split again
            alike = len({(dtypes[d], caps[d]) for d in sub}) == 1
            if len(sub) > 1 and not (alike and batch <= caps[sub[0]] * len(sub) - len(sub)):
                bal = balanced_rows(sub, batch, n, time_ms, cap_rows, lambda d: (dtypes[d], caps[d]))
                if bal is not None and bal not in row_maps:
                    row_maps.append(bal)
            for rows in row_maps:
                devs = tuple(d for d in range(n) if rows[d] > 0)
                for sync, server in sync_options(cluster, devs, has_params):
                    # the base's ZeRO stage and recomputation go with every row map (the memory pass set them)
                    dec = carry_memory(has_params, base.decisions[gid], Decision(rows=rows, sync=sync, server=server))
                    if dec not in seen:
                        seen.add(dec)
                        cands.append(dec)
        if base.pipeline is not None:
            cands = [c for c in cands if c is cands[0] or fits_pipeline(c, gid, base.pipeline)]
        candidates.append(cands)
        cost_key.append(_cost_key_ms(per_row, batch, group.param_bytes, med_bw_bytes_per_ms))
    return SearchSpace(order=_order(cost_key), candidates=candidates,
                       has_params=[group_has_params(gg, g) for g in range(len(gg.groups))],
                       splittable=[g.splittable for g in gg.groups],
                       device_class=[(d.machine, d.type.name) for d in cluster.devices])

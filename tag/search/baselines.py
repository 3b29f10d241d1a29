"""Baseline strategies: pure builders ``(gg, cluster, cost, training, batch) -> Strategy``.

- ``dp-even``: DDP. Every group on every device, rows even (remainder rows to the first devices), gradients in
  25 MiB buckets, each bucket's collective (ring, tree, hierarchical) chosen by cost as NCCL chooses.
- ``dp-proportional``: rows proportional to each device's speed on this model (HAP's DP-CP, Cannikin),
  then single-row moves while the slowest device's predicted compute time drops; buckets as dp-even (on
  identical devices the two are the same plan).
- ``ps``: like dp-even, gradients through parameter servers (a bucket fuses groups of one server): each group's server is the device with
  the fewest parameter bytes assigned so far, groups taken by decreasing parameter bytes (a
  bytes-balanced round robin).
- ``single-device``: the whole model on the fastest device (by predicted compute) that fits in memory
  by simulation.
- ``m-topo``, ``m-etf``: Baechi's memory-constrained placers (`tag.search.baselines_baechi`).

A group that cannot be split by rows goes whole on one device: the first device for dp-even and ps,
the device with the most rows for dp-proportional. Sync is None for groups without parameters or on
one device.
"""

from __future__ import annotations

import bisect
import math

from tag.search.baselines_baechi import m_etf, m_topo
from tag.strategy import AUTO, DEFAULT_BUCKET_MB, Decision, Strategy
from tag.graph.groups import group_has_params
from tag.search.space import even_rows as space_even_rows


def even_rows(batch: int, n: int) -> tuple[int, ...]:
    """`batch` rows over all n devices as evenly as possible, remainder rows to the first devices.

    >>> even_rows(10, 4)
    (3, 3, 2, 2)
    """
    return space_even_rows(range(n), batch, n)


def largest_remainder(batch: int, weights: list[float]) -> tuple[int, ...]:
    """Integer rows summing to `batch`, proportional to `weights` (largest remainder; ties to lower index).

    >>> largest_remainder(10, [1.0, 1.0, 1.0])
    (4, 3, 3)
    """
    total = sum(weights)
    ideal = [batch * w / total for w in weights]
    rows = [int(x) for x in ideal]
    order = sorted(range(len(weights)), key=lambda d: (-(ideal[d] - rows[d]), d))
    for d in order[: batch - sum(rows)]:
        rows[d] += 1
    return tuple(rows)


def replicated_strategy(gg, rows: tuple[int, ...], sync: str, host: int = 0,
                        servers: dict[int, int] | None = None, bucket_mb: float = DEFAULT_BUCKET_MB) -> Strategy:
    """Every splittable group on the row map `rows`, unsplittable groups whole on device `host`.

    Replicated groups with parameters sync with `sync` (server from `servers[group]` for ps), in buckets of
    `bucket_mb` MiB.
    """
    batch = sum(rows)
    whole = tuple(batch if d == host else 0 for d in range(len(rows)))
    decisions = []
    for g in gg.groups:
        r = rows if g.splittable else whole
        replicated = sum(1 for x in r if x > 0) > 1
        s = sync if replicated and group_has_params(gg, g.id) else None
        server = servers.get(g.id) if (s == "ps" and servers) else None
        decisions.append(Decision(rows=r, sync=s, server=server))
    return Strategy(tuple(decisions), bucket_mb)


def dp_even(gg, cluster, cost, training, batch: int) -> Strategy:
    """DDP: all groups on all devices with even rows, gradients in 25 MiB buckets, each bucket's collective chosen
    by cost (as NCCL chooses ring or tree)."""
    return replicated_strategy(gg, even_rows(batch, cluster.n_devices), AUTO)


def ps_servers(gg, n_devices: int) -> dict[int, int]:
    """Server device per group with parameters: largest groups first, each to the least-loaded device (bytes)."""
    load = [0.0] * n_devices
    servers = {}
    for g in sorted((g for g in gg.groups if group_has_params(gg, g.id)), key=lambda g: (-g.param_bytes, g.id)):
        d = min(range(n_devices), key=lambda d: (load[d], d))
        servers[g.id] = d
        load[d] += g.param_bytes
    return servers


def ps(gg, cluster, cost, training, batch: int) -> Strategy:
    """Parameter server: all groups on all devices, even rows, servers balanced by parameter bytes."""
    return replicated_strategy(gg, even_rows(batch, cluster.n_devices), "ps",
                               servers=ps_servers(gg, cluster.n_devices))


def compute_ms(gg, cost, device_type, rows: int, splittable: bool = True) -> float:
    """Forward + backward ms of the (splittable or unsplittable) groups for `rows` rows on one device type."""
    if rows <= 0:
        return 0.0
    return sum(cost.group_fwd_ms(g.id, device_type, rows) + cost.group_bwd_ms(g.id, device_type, rows)
               for g in gg.groups if g.splittable == splittable)


def proportional_rows(gg, cluster, cost, batch: int) -> tuple[tuple[int, ...], int]:
    """(rows per device, host device for unsplittable groups) for dp-proportional.

    Speeds: 1 / (forward + backward ms of the splittable groups at batch/n rows). Rows proportional to
    speed by largest remainder; the host is the device with the most rows. Then single rows move from
    a slowest device to another while that lowers the per-device compute times sorted in descending
    order (lexicographically: the maximum first, so ties at the maximum do not stop it), taking the
    best move each time. For times convex in rows this ends at the min-max split.
    """
    n = cluster.n_devices
    types = [d.type for d in cluster.devices]
    tid = cluster.type_ids
    cache: dict[tuple[int, int], float] = {}

    def t_split(d: int, r: int) -> float:
        key = (tid[d], r)
        if key not in cache:
            cache[key] = compute_ms(gg, cost, types[d], r)
        return cache[key]

    share = max(1, round(batch / n))
    rows = list(largest_remainder(batch, [1.0 / max(t_split(d, share), 1e-12) for d in range(n)]))
    host = max(range(n), key=lambda d: (rows[d], -d))
    host_ms = compute_ms(gg, cost, types[host], batch, splittable=False)

    def time_of(d: int, r: int) -> float:
        return t_split(d, r) + (host_ms if d == host else 0.0)

    # key(rows) = the per-device times sorted in descending order, held negated in ascending order (`neg`), so a
    # move's key is the current one with two entries replaced (bisect) instead of n times recomputed and sorted
    while True:  # each accepted move strictly lowers key(rows) lexicographically, so this ends
        t = [time_of(d, rows[d]) for d in range(n)]
        neg = sorted(-x for x in t)
        top = -neg[0]
        best = None
        # devices of one type with equal rows (neither or both the host) give equal trial keys and the first
        # pair found wins ties, so only the first device of each such class is tried as source and destination
        seen_a = set()
        for a in [d for d in range(n) if t[d] >= top - 1e-9 and rows[d] > 0]:
            if (tid[a], rows[a], a == host) in seen_a:
                continue
            seen_a.add((tid[a], rows[a], a == host))
            seen_b = set()
            for b in range(n):
                if b == a or (tid[b], rows[b], b == host) in seen_b:
                    continue
                seen_b.add((tid[b], rows[b], b == host))
                k = _replaced(neg, (-t[a], -t[b]), (-time_of(a, rows[a] - 1), -time_of(b, rows[b] + 1)))
                if _lex_less_negated(k, neg) and (best is None or _lex_less_negated(k, best[0])):
                    best = (k, a, b)
        if best is None:
            break
        rows[best[1]] -= 1
        rows[best[2]] += 1
    return tuple(rows), host


def _replaced(ordered: list[float], old: tuple[float, ...], new: tuple[float, ...]) -> list[float]:
    """A copy of the ascending list `ordered` with the values `old` (each present) replaced by `new`, still ascending.

    >>> _replaced([1.0, 2.0, 3.0], (2.0,), (5.0,))
    [1.0, 3.0, 5.0]
    """
    out = ordered.copy()
    for x in old:
        del out[bisect.bisect_left(out, x)]
    for x in new:
        bisect.insort(out, x)
    return out


def _lex_less_negated(a: list[float], b: list[float], tol: float = 1e-9) -> bool:
    """[-x for x in a] < [-x for x in b] lexicographically, entries within `tol` counted equal (a descending key
    held negated in ascending order).

    >>> _lex_less_negated([-3.0, -1.0], [-3.0, -2.0])
    True
    """
    for x, y in zip(a, b):
        if -x < -y - tol:
            return True
        if -x > -y + tol:
            return False
    return False


def dp_proportional(gg, cluster, cost, training, batch: int) -> Strategy:
    """Rows ∝ device speed (see `proportional_rows`); buckets and their collectives as `dp_even`."""
    rows, host = proportional_rows(gg, cluster, cost, batch)
    return replicated_strategy(gg, rows, AUTO, host=host)


def single_device(gg, cluster, cost, training, batch: int) -> Strategy:
    """The whole model on one device: the fastest (fwd + bwd + update) whose simulation fits in memory.

    One candidate per device type (devices of a type behave alike alone); if none fits, the fastest.
    """
    from tag.sim import simulate

    def whole_ms(t) -> float:
        return (compute_ms(gg, cost, t, batch) + compute_ms(gg, cost, t, batch, splittable=False)
                + sum(cost.update_ms(g.id, t) for g in gg.groups))

    seen, candidates = set(), []
    for d in cluster.devices:
        if d.type not in seen:
            seen.add(d.type)
            candidates.append((whole_ms(d.type), d.index))
    candidates.sort()
    strategies = []
    for _, d in candidates:
        s = replicated_strategy(gg, tuple(batch if i == d else 0 for i in range(cluster.n_devices)), AUTO, host=d)
        strategies.append(s)
        if not simulate(gg, cluster, cost, s, training).oom:
            return s
    return strategies[0]


BASELINES = {
    "dp-even": dp_even,
    "dp-proportional": dp_proportional,
    "ps": ps,
    "single-device": single_device,
    "m-etf": m_etf,
    "m-topo": m_topo,
}


def build_baseline(name: str, gg, cluster, cost, training, batch: int | None = None) -> Strategy:
    """The strategy of baseline `name` (a key of BASELINES); batch defaults to the graph's batch."""
    return BASELINES[name](gg, cluster, cost, training, gg.graph.batch_size if batch is None else batch)


def run_baselines(gg, cluster, cost, training, names=None, progress=None) -> dict:
    """Build and simulate each baseline: name -> (Strategy, SimResult), in BASELINES order.

    `progress`, if given, is called with each name after it is done (for a progress bar).
    """
    from tag.sim import simulate

    out = {}
    for name in (names or list(BASELINES)):
        s = build_baseline(name, gg, cluster, cost, training)
        out[name] = (s, simulate(gg, cluster, cost, s, training))
        if progress is not None:
            progress(name)
    return out


def best_baseline(baselines: dict[str, tuple[Strategy, object]]) -> str | None:
    """Name of the fastest baseline that fits in memory (None if every baseline runs out of memory)."""
    fits = [(res.iteration_ms, name) for name, (_, res) in baselines.items()
            if not res.oom and math.isfinite(res.iteration_ms)]
    return min(fits)[1] if fits else None


def least_oom_baseline(baselines: dict[str, tuple[Strategy, object]], usable_gb: dict[str, float]) -> str:
    """When every baseline runs out of memory: the one whose worst device overflows least."""
    def overflow(res) -> float:
        return max((gb / usable_gb[d] for d, gb in res.peak_memory_gb.items() if usable_gb.get(d)), default=math.inf)
    return min(baselines, key=lambda n: (overflow(baselines[n][1]), n))

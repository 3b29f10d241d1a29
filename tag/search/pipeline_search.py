"""Pipeline search: the stage count, the group cuts, each stage's devices and rows, the micro-batch count and the
schedule, by dynamic programming (`tag.search.pipeline_dp`) over the stage model (`tag.search.pipeline_model`).

For every micro-batch count m (divisors of the batch B up to MAX_MICRO_BATCHES; each replica gets >= 1 row per
micro-batch) the DP finds, for every stage count S <= MAX_STAGES, the contiguous cuts of the groups (topological
order) and of the devices (topology order: machines stay together) that minimise the slowest stage's time
m x (compute + boundary transfer) + gradient sync, under each device's memory with the micro-batches 1F1B keeps
in flight. Each (m, S) solution, under every schedule whose in-flight micro-batches fit (1F1B, kFkB with
k = 2, 4, 8, GPipe), is ranked by `estimate_ms` (the steady state bounded by the slowest stage, the busiest NIC
and the schedule's round trip, plus fill, drain and the most exposed sync), and the best few become strategies.
The simulator judges them (`tag.search.planner`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tag.graph.groups import group_has_params
from tag.search.pipeline_dp import CutSolution, best_capped_cuts, best_cuts
from tag.search.pipeline_model import BACKWARD_SHARE, BoundaryBytes, StageModel, StageRows
from tag.strategy import AUTO, DEFAULT_BUCKET_MB, Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage, max_in_flight, stage_order

MAX_STAGES = 8  # stage counts searched: 1 .. MAX_STAGES
MAX_MICRO_BATCHES = 64  # micro-batch counts searched: the batch's divisors up to this
MAX_GROUP_CUTS = 25  # cut positions over the groups (all of them when there are fewer groups)
MAX_DEVICE_CUTS = 17  # cut positions over the devices (all of them on up to 16 devices)
SYNC_CAP_LEVELS = 3  # tail caps below the whole model's all-reduce: divided by 4, 16, 64 (`sync_caps`)
KEEP = 8  # (m, S, schedule) solutions turned into strategies (plus the best of each other stage count)


@dataclass(frozen=True)
class PipelineCandidate:
    """A pipelined strategy and the stage model's estimate of its iteration, ms."""

    name: str
    strategy: Strategy
    estimate_ms: float


def micro_batch_counts(batch: int, limit: int = MAX_MICRO_BATCHES) -> list[int]:
    """The divisors of `batch` up to `limit`, ascending.

    >>> micro_batch_counts(24, 8)
    [1, 2, 3, 4, 6, 8]
    """
    return [m for m in range(1, min(batch, limit) + 1) if batch % m == 0]


def group_cut_positions(weights: list[float], limit: int = MAX_GROUP_CUTS) -> list[int]:
    """Positions 0..G where stages may start: all when G + 1 <= limit, else 0, G and the first position where the
    cumulative weight reaches each k / (limit - 1) of the total.

    >>> group_cut_positions([1.0] * 8, 5)
    [0, 2, 4, 6, 8]
    """
    n = len(weights)
    if n + 1 <= limit:
        return list(range(n + 1))
    total = float(sum(weights)) or 1.0
    out, acc, k = {0, n}, 0.0, 1
    for i, w in enumerate(weights):
        acc += w
        while k < limit - 1 and acc >= total * k / (limit - 1) - 1e-12:
            out.add(i + 1)
            k += 1
    return sorted(out)


def cheap_cut_positions(cross_bytes: list[float], weights: list[float], limit: int = MAX_GROUP_CUTS,
                        slack: float = 1.25, window: int | None = None) -> list[int]:
    """Cut positions preferring cheap boundaries: the interior positions whose crossing bytes per row
    (cross_bytes[i], i = 1..G-1: tensors made by groups < i and read by groups >= i, each once,
    `BoundaryBytes.across`) are within `slack` of the cheapest position among their neighbours within
    `window` (default max(2, G // (2 limit)): every stretch of the model
    offers its locally cheapest cuts, e.g. a transformer's layer boundaries, not only the globally cheapest one),
    thinned to `limit` by the weight quantiles (`group_cut_positions` over the runs between them); 0 and G always.

    >>> cheap_cut_positions([0, 5, 1, 5, 1, 5, 1, 5], [1.0] * 8, 10, window=1)
    [0, 2, 4, 6, 8]
    >>> cheap_cut_positions([0, 1, 3, 9, 3, 9, 3, 9], [1.0] * 8, 10, window=1)
    [0, 1, 4, 6, 8]
    """
    n = len(weights)
    w = max(2, n // (2 * limit)) if window is None else window
    keep = [i for i in range(1, n)
            if cross_bytes[i] <= min(cross_bytes[max(1, i - w):min(n, i + w + 1)]) * slack + 1e-9]
    if len(keep) + 2 <= limit:
        return [0] + keep + [n]
    pos = [0] + keep + [n]
    runs = [sum(weights[a:b]) for a, b in zip(pos, pos[1:])]
    return [pos[i] for i in group_cut_positions(runs, limit)]


def device_cut_positions(machine_sizes: list[int], limit: int = MAX_DEVICE_CUTS) -> list[int]:
    """Positions in the device order where blocks may start: every device when N + 1 <= limit, else machine
    boundaries only (stages on larger clusters do not share a machine, hence not its NIC), thinned to `limit`
    evenly when there are more machines than that.

    >>> device_cut_positions([2, 2], 17)
    [0, 1, 2, 3, 4]
    >>> device_cut_positions([8, 8, 8], 3)
    [0, 16, 24]
    """
    n = sum(machine_sizes)
    if n + 1 <= limit:
        return list(range(n + 1))
    starts, acc = [], 0
    for s in machine_sizes:
        starts.append(acc)
        acc += s
    cuts = starts + [n]
    if len(cuts) > limit:
        idx = sorted({round(i * (len(cuts) - 1) / (limit - 1)) for i in range(limit)})
        cuts = [cuts[i] for i in idx]
    return cuts


def schedule_unit(schedule: str, k: int, m: int) -> int:
    """Micro-batches per schedule unit: 1 for 1F1B, k for kFkB, m for GPipe (`Pipeline.unit`)."""
    return m if schedule == "gpipe" else (k if schedule == "kfkb" else 1)


def estimate_ms(rows: list[StageRows], m: int, schedule: str = "1f1b", k: int = 1) -> float:
    """The stage model's iteration time of a pipeline (stages first to last) under a schedule, ms.

    With c_s a micro-batch's compute on stage s, x_s its busiest NIC direction, t_b = max(out_ms of stage b,
    in_ms of stage b + 1) one micro-batch's crossing of boundary b and u the schedule's unit (1 for 1F1B, k for
    kFkB, m for GPipe): stage 0 keeps at most u S micro-batches in flight, and each unit makes a round trip through
    every stage (u sum c) and every boundary both ways (2 sum t, of which u micro-batches in a row hide all but
    about 1 / u), so the steady state takes per micro-batch

        period = max(max_s c_s, max_s x_s, (u sum c + 2 sum t / u) / (u S)),

    the pipeline (m - 1) period + sum c + 2 sum t (one micro-batch's round trip: fill and drain), and the
    iteration adds the most exposed sync: stage s's sync (after its last backward) less that backward's share of
    its compute (buckets start as gradients are ready) and the drain of the earlier stages' backwards
    (2/3 c and the boundary's t each).

    >>> st = StageRows((4,), 10.0, 0.0, 0.0, 0)
    >>> estimate_ms([st, st], 4)  # 2 stages x 4 micro-batches, free links: (m + S - 1) x c
    50.0
    """
    n = len(rows)
    u = schedule_unit(schedule, k, m)
    c = [r.compute_ms for r in rows]
    t = [max(a.out_ms, b.in_ms) for a, b in zip(rows, rows[1:])]
    loop = u * sum(c) + 2.0 * sum(t) / u
    period = max(max(max(r.compute_ms, r.transfer_ms) for r in rows), loop / (u * n))
    # fill: stage s emits its warm-up forwards (W = min(m, u (S - s)) micro-batches in flight) back to back; when a
    # crossing takes longer than a forward (c / 3), they share the boundary's NIC and the first arrives with the
    # last, after about W crossings
    fill = sum(tb * (min(m, u * (n - s)) if tb > c[s] / 3.0 else 1) for s, tb in enumerate(t))
    pipe = (m - 1) * period + sum(c) + fill + sum(t)
    exposed, drain = 0.0, 0.0
    for s, r in enumerate(rows):
        exposed = max(exposed, r.sync_ms - BACKWARD_SHARE * r.compute_ms - drain)
        drain += BACKWARD_SHARE * r.compute_ms + (t[s] if s < len(t) else 0.0)
    return pipe + max(0.0, exposed)


def sync_caps(model: StageModel, levels: int = SYNC_CAP_LEVELS) -> list[float]:
    """The tail caps `best_capped_cuts` tries: none, and the whole model's all-reduce over every device of the order
    (`StageModel._sync_ms`, the largest sync a stage can have) divided by 4 ** k for k = 1 .. `levels`, ms."""
    whole = model.sync_ms(0, len(model.order), 0, model.gg.n_groups)
    return [math.inf] + [whole / 4 ** k for k in range(1, levels + 1)]


def search_cuts(model: StageModel, m: int, group_cuts: list[int], device_cuts: list[int],
                max_stages: int) -> dict[int, list[tuple[CutSolution, list[StageRows]]]]:
    """S -> the DP's solutions (cuts, each stage's rows and times) for m micro-batches under 1F1B in-flight
    memory: the least max steady part + max exposed sync over the ladder of sync caps (`best_capped_cuts`,
    `sync_caps`), and the least slowest stage time (`StageRows.stage_ms`, steady + sync); distinct cuts only."""
    uncapped: dict = {}
    # (in-flight, lo, hi, dlo, dhi) -> (StageRows or None, (steady ms, exposed sync ms), stage ms); the DP's calls
    # take explicit arguments and read the memo directly (about half a million calls on bert_large)
    memo: dict = {}
    none = (None, (math.inf, math.inf), math.inf)

    def entry(left: int, lo: int, hi: int, dlo: int, dhi: int) -> tuple:
        k2 = (left if left < m else m, lo, hi, dlo, dhi)  # (min(left, m), ...)
        e = memo.get(k2)
        if e is None:
            e = memo[k2] = _stage_entry(model, uncapped, m, *k2)
        return e

    def steady(left: int, lo: int, hi: int, dlo: int, dhi: int) -> float:
        return entry(left, lo, hi, dlo, dhi)[1][0]

    def tail(left: int, lo: int, hi: int, dlo: int, dhi: int) -> float:
        return entry(left, lo, hi, dlo, dhi)[1][1]

    def parts(left: int, lo: int, hi: int, dlo: int, dhi: int) -> tuple[float, float]:
        e = memo.get((left if left < m else m, lo, hi, dlo, dhi))
        return (e if e is not None else entry(left, lo, hi, dlo, dhi))[1]

    def stage_ms(left: int, lo: int, hi: int, dlo: int, dhi: int) -> float:
        e = memo.get((left if left < m else m, lo, hi, dlo, dhi))
        return (e if e is not None else entry(left, lo, hi, dlo, dhi))[2]

    def capped_under(cap: float):
        def capped(left: int, lo: int, hi: int, dlo: int, dhi: int, inf=math.inf) -> float:
            e = memo.get((left if left < m else m, lo, hi, dlo, dhi))
            p, t = (e if e is not None else entry(left, lo, hi, dlo, dhi))[1]
            return p if t <= cap else inf
        return capped

    sols = best_capped_cuts(group_cuts, device_cuts, max_stages, steady, tail, sync_caps(model), parts, capped_under)
    for s, sol in best_cuts(group_cuts, device_cuts, max_stages, stage_ms).items():
        if all(x.stages != sol.stages for x in sols.setdefault(s, [])):
            sols[s].append(sol)
    return {s: [(sol, [entry(s - i, c.lo, c.hi, c.dlo, c.dhi)[0] for i, c in enumerate(sol.stages)]) for sol in found]
            for s, found in sols.items()}


def _entry_of(st: StageRows | None, m: int) -> tuple:
    """`search_cuts`' memo entry of a stage: (StageRows or None, (steady ms, exposed sync ms), stage ms)."""
    if st is None:
        return None, (math.inf, math.inf), math.inf
    return st, (st.steady_ms(m), st.exposed_sync_ms()), st.stage_ms(m)


def _stage_entry(model: StageModel, uncapped: dict, m: int, in_flight: int, lo: int, hi: int, dlo: int,
                 dhi: int) -> tuple:
    """The memo entry (`_entry_of`) of the stage with `in_flight` micro-batches alive: its rows without that limit
    (in_flight 1) when they fit, else rows sized for it.

    `uncapped` keeps per (lo, hi, dlo, dhi) [entry of the rows without the limit, the most micro-batches known to
    fit them, the fewest known not to]: fitting (`StageModel.fits`: fixed + per_row x rows x in_flight <= usable)
    is monotone in in_flight (IEEE multiplication and addition are monotone), so every in_flight at or below the
    first bound fits and every one at or above the second does not, without asking again; stages of every stage
    count the DP tries share the one entry of the unlimited rows."""
    key = (lo, hi, dlo, dhi)
    u = uncapped.get(key)
    if u is None:
        u = uncapped[key] = [_entry_of(model.stage(lo, hi, dlo, dhi, m, 1), m), 1, math.inf]
    base = u[0]
    if base[0] is None or in_flight <= u[1]:
        return base
    if in_flight < u[2]:
        if model.fits(lo, hi, dlo, base[0].micro_rows, in_flight):
            u[1] = in_flight
            return base
        u[2] = in_flight
    return _entry_of(model.stage(lo, hi, dlo, dhi, m, in_flight), m)


def build_strategy(gg, model: StageModel, sol: CutSolution, rows: list[StageRows], m: int,
                   schedule: str = "1f1b", k: int = 1) -> Strategy:
    """The pipelined Strategy of a DP solution: per stage, splittable groups take the stage's row map (micro rows
    x m per device), unsplittable ones all rows on the stage's host; replicated groups with parameters sync auto.
    One stage with one micro-batch is plain data parallelism: no pipeline."""
    n = model.cluster.n_devices
    decisions: list[Decision | None] = [None] * gg.n_groups
    stages = []
    for cut, st in zip(sol.stages, rows):
        full = [0] * n
        for pos, r in zip(range(cut.dlo, cut.dhi), st.micro_rows):
            full[model.order[pos]] = r * m
        whole = [0] * n
        whole[model.order[cut.dlo + st.host]] = model.batch
        for g in range(cut.lo, cut.hi):
            r = tuple(full) if gg.groups[g].splittable else tuple(whole)
            rep = sum(1 for x in r if x > 0) > 1
            decisions[g] = Decision(r, AUTO if rep and group_has_params(gg, g) else None)
        devs = tuple(sorted({d for g in range(cut.lo, cut.hi) for d, x in enumerate(decisions[g].rows) if x > 0}))
        stages.append(Stage(tuple(range(cut.lo, cut.hi)), devs))
    if len(stages) == 1 and m == 1:  # one stage, one micro-batch: no pipelining (no stages key in plan.json)
        return Strategy(tuple(decisions), DEFAULT_BUCKET_MB)
    return Strategy(tuple(decisions), DEFAULT_BUCKET_MB, pipeline=Pipeline(tuple(stages), m, schedule, k))


def schedule_fits(model: StageModel, sol: CutSolution, rows: list[StageRows], m: int, schedule: str, k: int) -> bool:
    """True when every stage's devices hold the micro-batches `schedule` keeps in flight (the stage model)."""
    n_st = len(sol.stages)
    for s, (cut, st) in enumerate(zip(sol.stages, rows)):
        live = max_in_flight(stage_order(schedule, k, n_st, s, m))
        if not model.fits(cut.lo, cut.hi, cut.dlo, st.micro_rows, live):
            return False
    return True


def schedule_variants(m: int) -> list[tuple[str, int]]:
    """(schedule, k) tried for m micro-batches: 1F1B, kFkB for k = 2, 4, 8 dividing m and below it, GPipe.

    >>> schedule_variants(8)
    [('1f1b', 1), ('kfkb', 2), ('kfkb', 4), ('gpipe', 1)]
    """
    return [("1f1b", 1)] + [("kfkb", k) for k in (2, 4, 8) if m % k == 0 and m > k] + [("gpipe", 1)]


def device_orders(cluster, limit: int = MAX_DEVICE_CUTS) -> list[list[int]]:
    """The device orders the DP cuts into blocks: topology order, and when blocks are whole machines (more than
    limit - 1 devices, `device_cut_positions`) also the machines reversed (each machine's devices still in topology
    order), so that either end of the cluster can hold the first stage, whose gradient sync nothing overlaps.

    >>> from types import SimpleNamespace as N
    >>> device_orders(N(devices=[N(index=0, machine="a"), N(index=1, machine="a"), N(index=2, machine="b")]), 3)
    [[0, 1, 2], [2, 0, 1]]
    """
    order = [d.index for d in cluster.devices]
    machines = list(dict.fromkeys(d.machine for d in cluster.devices))
    if len(machines) < 2 or len(order) + 1 <= limit:
        return [order]
    return [order, [d.index for mach in reversed(machines) for d in cluster.devices if d.machine == mach]]


def start_candidates(found: list[PipelineCandidate], keep: int = KEEP) -> list[PipelineCandidate]:
    """The pipelines of `found` (best first) that the search simulates as starts: the first `keep`, and the best of
    each further stage count (a one-stage candidate counts as one stage).

    >>> from types import SimpleNamespace as N
    >>> c = lambda n, s: N(name=n, strategy=N(pipeline=s and N(stages=[0] * s)))
    >>> [x.name for x in start_candidates([c("a", 2), c("b", 2), c("c", 3), c("d", None), c("e", 3)], keep=1)]
    ['a', 'c', 'd']
    """
    stages = [c.strategy.pipeline and len(c.strategy.pipeline.stages) for c in found]
    return [c for i, c in enumerate(found) if i < keep or stages[i] not in stages[:i]]


def pipeline_candidates(gg, cluster, cost, training, batch: int, *, max_stages: int = MAX_STAGES,
                        keep: int = KEEP, workers: int = 0) -> list[PipelineCandidate]:
    """The best `keep` pipelines by the stage model's estimate (`estimate_ms`) over every micro-batch count m,
    stage count S (the DP's cuts under 1F1B memory) and schedule of `schedule_variants` whose in-flight
    micro-batches fit, then the best of every other stage count, best first. With one stage, m > 1 is gradient
    accumulation (schedules are the same there: 1F1B only). Named ``pipeline-S<S>-m<m>-<schedule>``
    (``dp-balanced``: one stage, one micro-batch, no pipeline); names are unique: a further pipeline of the same
    S, m and schedule (other cuts or device order) gets ``-v2``, ``-v3``, ... in order. The DP's searches (one per
    device order and m) are shared out with `workers` forked processes (`tag.search.prefetch.fork_map`): the same
    candidates with any number."""
    from tag.search.prefetch import fork_map

    weights = [g.fwd_flops_per_row + g.bwd_flops_per_row for g in gg.groups]
    boundary = BoundaryBytes(gg)  # each tensor once per cut, shared by both device orders' models
    cross = [boundary.across(i) for i in range(gg.n_groups)]
    gcuts = sorted(set(group_cut_positions(weights)) | set(cheap_cut_positions(cross, weights)))
    found, jobs = [], []
    for order in device_orders(cluster):
        model = StageModel(gg, cluster, cost, training.optimizer, batch, order, boundary)
        sizes: dict[str, int] = {}
        for i in order:
            mach = cluster.devices[i].machine
            sizes[mach] = sizes.get(mach, 0) + 1
        dcuts = device_cut_positions(list(sizes.values()))
        jobs += [(model, m, dcuts) for m in micro_batch_counts(batch)]
    solved = fork_map(lambda job: search_cuts(job[0], job[1], gcuts, job[2], min(max_stages, gg.n_groups)), jobs,
                      workers)
    for (model, m, _), by_stages in zip(jobs, solved):
        for s, sols in by_stages.items():
            for sol, rows in sols:
                for schedule, k in (schedule_variants(m) if s > 1 else [("1f1b", 1)]):
                    if (schedule, k) != ("1f1b", 1) and not schedule_fits(model, sol, rows, m, schedule, k):
                        continue
                    found.append((estimate_ms(rows, m, schedule, k), s, m, schedule, k, len(found), model, sol, rows))
    found.sort(key=lambda x: x[:6])
    chosen = found[:keep]
    for s in sorted({x[1] for x in found}):  # and the best of every stage count
        best_s = next(x for x in found if x[1] == s)
        if best_s not in chosen:
            chosen.append(best_s)
    out: list[PipelineCandidate] = []
    seen = set()
    uses: dict[str, int] = {}  # candidates named so far per base name
    for est, s, m, schedule, k, _, model, sol, rows in chosen:
        strat = build_strategy(gg, model, sol, rows, m, schedule, k)
        if strat in seen:  # one stage on every device is the same pipeline in either order
            continue
        seen.add(strat)
        tag = schedule if schedule != "kfkb" else f"kfkb{k}"
        name = f"pipeline-S{s}-m{m}-{tag}" if strat.pipeline else "dp-balanced"
        uses[name] = uses.get(name, 0) + 1
        out.append(PipelineCandidate(name if uses[name] == 1 else f"{name}-v{uses[name]}", strat, est))
    return out

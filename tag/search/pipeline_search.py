"""Pipeline search: the stage count, the group cuts, each stage's devices and rows, the micro-batch count and the
schedule, by dynamic programming (`tag.search.pipeline_dp`) over the stage model (`tag.search.pipeline_model`).

For every micro-batch count m (divisors of the batch B up to MAX_MICRO_BATCHES; each replica gets >= 1 row per
micro-batch) the DP finds, for every stage count S <= MAX_STAGES, the contiguous cuts of the groups (topological
order) and of the devices (topology order: machines stay together) that minimise the slowest stage's time
m x (compute + boundary transfer) + gradient sync, under each device's memory with the micro-batches 1F1B keeps
in flight. Each (m, S) solution is ranked by the estimate

    estimate_ms = slowest stage + sum over the other stages of one micro-batch's time + transfer

(the fill and drain of a 1F1B pipeline), and the best few become strategies: 1F1B, and for the best two with
several stages GPipe and kFkB (k = 2, 4) when their in-flight micro-batches fit too. The simulator judges them (`tag.search.planner`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tag.graph.groups import group_has_params
from tag.search.pipeline_dp import CutSolution, best_cuts
from tag.search.pipeline_model import StageModel, StageRows
from tag.strategy import AUTO, DEFAULT_BUCKET_MB, Decision, Strategy
from tag.strategy.pipeline import Pipeline, Stage, max_in_flight, stage_order

MAX_STAGES = 8  # stage counts searched: 1 .. MAX_STAGES
MAX_MICRO_BATCHES = 64  # micro-batch counts searched: the batch's divisors up to this
MAX_GROUP_CUTS = 25  # cut positions over the groups (all of them when there are fewer groups)
MAX_DEVICE_CUTS = 17  # cut positions over the devices (all of them on up to 16 devices)
KEEP = 6  # (m, S) solutions turned into strategies (plus the best of each other stage count)
VARIANTS_OF = 2  # multi-stage solutions that also get GPipe and kFkB (k = 2, 4) variants


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
                        slack: float = 1.25) -> list[int]:
    """Cut positions preferring cheap boundaries: the interior positions whose crossing bytes per row
    (cross_bytes[i], i = 1..G-1: edges from groups < i to groups >= i) are within `slack` of the cheapest, thinned
    to `limit` by the weight quantiles (`group_cut_positions` over the runs between them); 0 and G always.

    >>> cheap_cut_positions([0, 5, 1, 5, 1, 5, 1, 5], [1.0] * 8, 10)
    [0, 2, 4, 6, 8]
    """
    n = len(weights)
    lo = min(cross_bytes[1:n], default=0.0)
    keep = [i for i in range(1, n) if cross_bytes[i] <= lo * slack + 1e-9]
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
    [0, 8, 24]
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


def _estimate_ms(rows: list[StageRows], m: int) -> float:
    per_mb = [r.per_micro_batch_ms() + r.transfer_ms for r in rows]
    busy = [r.stage_ms(m) for r in rows]
    worst = max(range(len(rows)), key=lambda s: busy[s])
    return busy[worst] + sum(t for s, t in enumerate(per_mb) if s != worst)


def search_cuts(model: StageModel, m: int, group_cuts: list[int], device_cuts: list[int],
                max_stages: int) -> dict[int, tuple[CutSolution, list[StageRows]]]:
    """S -> (the DP's cuts, each stage's rows and times) for m micro-batches under 1F1B in-flight memory."""
    uncapped: dict = {}
    memo: dict = {}

    def stage(left: int, lo: int, hi: int, dlo: int, dhi: int) -> StageRows | None:
        in_flight = min(left, m)
        key = (lo, hi, dlo, dhi)
        base = uncapped.get(key, False)
        if base is False:
            base = uncapped[key] = model.stage(lo, hi, dlo, dhi, m, 1)
        if base is None:
            return None
        if in_flight == 1 or model.fits(lo, hi, dlo, base.micro_rows, in_flight):
            return base
        k2 = (in_flight,) + key
        if k2 not in memo:
            memo[k2] = model.stage(lo, hi, dlo, dhi, m, in_flight)
        return memo[k2]

    def stage_ms(left, lo, hi, dlo, dhi) -> float:
        st = stage(left, lo, hi, dlo, dhi)
        return math.inf if st is None else st.stage_ms(m)

    out = {}
    for s, sol in best_cuts(group_cuts, device_cuts, max_stages, stage_ms).items():
        rows = [stage(s - i, c.lo, c.hi, c.dlo, c.dhi) for i, c in enumerate(sol.stages)]
        out[s] = (sol, rows)
    return out


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


def pipeline_candidates(gg, cluster, cost, training, batch: int, *, max_stages: int = MAX_STAGES,
                        keep: int = KEEP) -> list[PipelineCandidate]:
    """The best `keep` (m, S) pipelines by the stage model's estimate and the best of every other stage count
    (1F1B; with one stage, m > 1 is gradient accumulation), then GPipe and kFkB (k = 2, 4 below m) variants of the
    best VARIANTS_OF multi-stage ones when their in-flight micro-batches fit, in that order. Named
    ``pipeline-S<S>-m<m>-<schedule>`` (``dp-balanced``: one stage, one micro-batch, no pipeline)."""
    order = [d.index for d in cluster.devices]
    model = StageModel(gg, cluster, cost, training.optimizer, batch, order)
    weights = [g.fwd_flops_per_row + g.bwd_flops_per_row for g in gg.groups]
    cross = [sum(e.bytes_per_row for e in gg.edges if e.src < i <= e.dst) for i in range(gg.n_groups)]
    gcuts = sorted(set(group_cut_positions(weights)) | set(cheap_cut_positions(cross, weights)))
    sizes: dict[str, int] = {}
    for d in cluster.devices:
        sizes[d.machine] = sizes.get(d.machine, 0) + 1
    dcuts = device_cut_positions(list(sizes.values()))
    found = []
    for m in micro_batch_counts(batch):
        for s, (sol, rows) in search_cuts(model, m, gcuts, dcuts, min(max_stages, gg.n_groups)).items():
            found.append((_estimate_ms(rows, m), s, m, sol, rows))
    found.sort(key=lambda x: (x[0], x[1], x[2]))
    chosen = found[:keep]
    for s in sorted({x[1] for x in found}):  # and the best of every stage count
        best_s = next(x for x in found if x[1] == s)
        if best_s not in chosen:
            chosen.append(best_s)
    out: list[PipelineCandidate] = []
    for est, s, m, sol, rows in chosen:
        strat = build_strategy(gg, model, sol, rows, m)
        out.append(PipelineCandidate(f"pipeline-S{s}-m{m}-1f1b" if strat.pipeline else "dp-balanced", strat, est))
    multi = [x for x in found if x[1] > 1][:VARIANTS_OF]  # the best multi-stage pipelines get other schedules
    for est, s, m, sol, rows in multi:
        variants = [("gpipe", 1)] + [("kfkb", k) for k in (2, 4) if m % k == 0 and m > k]
        for schedule, k in variants:
            if schedule_fits(model, sol, rows, m, schedule, k):
                tag = schedule if schedule != "kfkb" else f"kfkb{k}"
                out.append(PipelineCandidate(f"pipeline-S{s}-m{m}-{tag}",
                                             build_strategy(gg, model, sol, rows, m, schedule, k), est))
    return out

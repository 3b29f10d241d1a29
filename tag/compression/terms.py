"""The cost terms the SFB selection model needs, read from the simulator (one traced run without SFB).

A `SyncUnit` is one gradient sync as the simulator schedules it: a communicator (device set), the time it
becomes ready (the last backward of its groups ends), its time alone on the network and, per directed
link, how long it keeps that link busy. Times alone come from the simulator's own collectives
(`tag.sim.collectives` via the simulation context): a phase lasts its slowest flow,
``volume x max over links (weight / capacity) + latency``, and a sync is the sum of its phases. The
all-reduce time is linear in its bytes, so a candidate that leaves it removes ``slope x |W|``.

`CandidateTerms` holds, for one SFB candidate, what choosing it changes: all-reduce bytes removed,
all-gather time added (X and dY, two gathers as deploy runs them), link busy time removed and added,
backward time saved per replica (no local dW) and dW time added per replica before its optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tag.compression.eligibility import Candidate
from tag.sim.context import sim_context
from tag.sim.buckets import own_sync_bytes
from tag.sim.gradsync import shared_params, sync_method, tensor_bytes
from tag.sim.sfb import dw_ms


@dataclass
class SyncUnit:
    """One sync of the run without SFB (see the module docstring); times in ms."""

    groups: tuple[int, ...]
    devices: tuple[int, ...]
    ready_ms: float
    alone_ms: float
    ar_ms_per_byte: float  # slope of alone_ms in the synced bytes
    link_ms: dict[int, float] = field(default_factory=dict)  # link -> busy ms alone
    link_ms_per_byte: dict[int, float] = field(default_factory=dict)


@dataclass
class CandidateTerms:
    """What choosing one candidate changes (ms and bytes; per-device dicts keyed by device index)."""

    unit: int  # index of the group's own SyncUnit
    weight_bytes: float
    gather_bytes: float  # X and dY gathered, bytes in total
    gather_ms: float  # both all-gathers alone on the network
    gather_link_ms: dict[int, float]
    bwd_saved_ms: dict[int, float]
    dw_added_ms: dict[int, float]


@dataclass
class Terms:
    units: list[SyncUnit]
    cands: list[CandidateTerms]
    bwd_end_ms: dict[tuple[int, int], float]  # (group, device) -> end of that backward task
    last_bwd_ms: dict[int, float]  # device -> end of its last backward
    update_ms: dict[int, float]  # device -> optimizer step duration
    end_ms: dict[int, float]  # device -> end of its last forward or backward task (before the step)
    iteration_ms: float


def _alone(ctx, method: str, devices: tuple, nbytes: float, server) -> tuple[float, dict[int, float]]:
    """Time alone on the network (ms) of one sync and each link's busy time (ms)."""
    caps = [l.bytes_per_ms for l in ctx.cluster.links]
    total, busy = 0.0, {}
    for phase in ctx.phases(method, devices, nbytes, server):
        worst = 0.0
        for f in phase:
            per = max((w / caps[l] for l, w in zip(f.links, f.weights)), default=0.0)
            worst = max(worst, f.volume_bytes * per + f.latency_ms)
            for l, w in zip(f.links, f.weights):
                busy[l] = busy.get(l, 0.0) + f.volume_bytes * w / caps[l]
        total += worst
    return total, busy


def _timings(result, n_dev: int):
    bwd_end, last_bwd, upd, end = {}, {d: 0.0 for d in range(n_dev)}, {d: 0.0 for d in range(n_dev)}, {d: 0.0 for d in range(n_dev)}
    for ev in result.trace_events:
        if ev.get("ph") != "X" or ev.get("pid") != 0:
            continue
        d, t_end = ev["tid"], (ev["ts"] + ev["dur"]) / 1e3
        if ev["cat"] != "update":
            end[d] = max(end[d], t_end)
        if ev["cat"] == "bwd":
            bwd_end[(ev["args"]["group"], d)] = t_end
            last_bwd[d] = max(last_bwd[d], t_end)
        elif ev["cat"] == "update":
            upd[d] = ev["dur"] / 1e3
    return bwd_end, last_bwd, upd, end


def build_terms(gg, cluster, cost, training, strategy, cands: list[Candidate], traced) -> Terms:
    """The `Terms` of `strategy` (without SFB) and `cands`, from `traced` = its simulation with trace=True."""
    ctx = sim_context(gg, cluster, cost, training)
    decs = strategy.decisions
    bwd_end, last_bwd, upd, end = _timings(traced, cluster.n_devices)
    units: list[SyncUnit] = []
    own_unit: dict[int, int] = {}

    def add(groups, devices, method, nbytes, server):
        ready = max(bwd_end.get((g, d), 0.0) for g in groups for d in decs[g].devices)
        t, busy = _alone(ctx, method, devices, nbytes, server)
        t2, busy2 = _alone(ctx, method, devices, nbytes / 2, server)
        slope = 2 * (t - t2) / nbytes if nbytes > 0 else 0.0
        units.append(SyncUnit(tuple(groups), tuple(devices), ready, t, slope, busy,
                              {l: 2 * (busy[l] - busy2.get(l, 0.0)) / nbytes for l in busy}))

    for pname, gids in shared_params(gg).items():
        nbytes = tensor_bytes(gg, pname)
        union = tuple(sorted({d for g in gids for d in decs[g].devices}))
        if len(union) > 1 and nbytes > 0:
            add(gids, union, ctx.resolve_method(sync_method(decs[gids[0]]), union, nbytes), nbytes,
                decs[gids[0]].server)
    bucket_of = {g: bs.bucket for bs in ctx.bucket_syncs(strategy) for g in bs.bucket.groups}
    for g, nbytes in enumerate(own_sync_bytes(gg, decs)):  # each group's own sync by its bucket's algorithm
        if nbytes > 1e-9:
            own_unit[g] = len(units)
            add((g,), decs[g].devices, bucket_of[g].algorithm, nbytes, bucket_of[g].server)
    prec = getattr(training, "precision", "fp32")
    terms: list[CandidateTerms] = []
    for c in cands:
        dec, f = decs[c.group], c.factors
        devs, batch = dec.devices, sum(dec.rows)
        gb = batch * (f.x_bytes_per_row + f.dy_bytes_per_row)
        gx, bx = _alone(ctx, "allgather", devs, batch * f.x_bytes_per_row, None)
        gy, by = _alone(ctx, "allgather", devs, batch * f.dy_bytes_per_row, None)
        links = {l: bx.get(l, 0.0) + by.get(l, 0.0) for l in set(bx) | set(by)}
        dts = ctx.dtypes
        terms.append(CandidateTerms(own_unit[c.group], f.weight_bytes, gb, gx + gy, links,
                                    {d: dw_ms(f, dts[d], dec.rows[d], cost, prec) for d in devs},
                                    {d: dw_ms(f, dts[d], batch, cost, prec) for d in devs}))
    return Terms(units, terms, bwd_end, last_bwd, upd, end, traced.fit_iteration_ms)

"""Contention: what the machine does to a plan's compute and messages when its ranks run at once (issue 27).

`tag profile ops` measures these terms next to the op times (`tag.profile.contention`; the profile's ``contention``
block, read into `ContentionTerms`), and the prediction of a plan as deploy runs it (`deployed_step_ms`: what
`tag deploy` prints and the fidelity benchmark's headline column) applies them. The one place of these formulas.

With n = the ranks the plan runs (at least 2) and c = the plan's simulated concurrency (`concurrency`: the mean
number of ranks computing at once while any computes, (sum of busy ms) / (ms in which at least one rank computes,
`compute_span_ms` of the simulated trace), clamped to [1, n]; the terms scale compute only, so time in which no rank
computes, a data-parallel step's gradient sums, counts for neither), the share of the way from
"one rank computes, the others wait" to "every rank computes" is ``f = (c - 1) / (n - 1)``, and

* **stretch** (wall ms per thread-CPU ms of compute; only for a profile timed in thread CPU time, which does not
  hold the time the scheduler gives the core to someone else): ``s(c) = alone + f x (together - alone)`` from
  the probe's figures, per rank averaged;
* **speed** (thread-CPU ms of the model's own step with every rank stepping at once over the same step alone:
  shared caches and memory bandwidth, the host's SMT siblings): ``v(c) = 1 + f x (together_speed - 1)``;
* **rank speed** (`rank_speed`: the square root of r = thread-CPU ms of the model's step in a rank's process, the
  probe's alone figure, over the same step as the profile's ``step`` block timed it in the profiling process, at the
  probe's rows): deploy runs each rank in its own process, and the probe times the very runtime, groups and rows the
  step block did, a minute or so later. Each figure is one median of a few steps on a machine whose speed drifts
  between minutes by as much as r differs from 1, so half of log r is taken as signal (shrunk halfway to 1: the
  least-squares estimate when signal and noise vary alike); 1 when the step block does not span the probe's rows or
  the clock is ``wall``;
* every compute and update time is multiplied by ``s(c) x v(c) x rank_speed`` (`compute_scale`), the stretch
  divided by the profile's CPU-quota factor (``quota_scale``, 1 / q below one core): the probe's ranks ran under the
  profile's quota, so their wall / CPU ratios already hold its throttling, which the cost model applies to every time
  (`tag.cost.profiled`);
* **handoff** (ms a rank that waited for a message pays before it runs again): added to the latency of every
  pair of devices;
* **call cost** (``call_ms``, optional: ms of one small collective call right after every rank computed, by the
  kind of call, gloo's ``allreduce`` or ``p2p`` messages): not applied here but by the cost model whenever the
  profile has it (`tag.cost.profiled.ProfileCostModel.collective_call_ms`), as a floor on each collective call's
  latency on CPU ranks (`tag.sim.cpu_calls`).

* **cores** (optional: the cores the probe's machine gave its processes): when the run's ranks are at least as many,
  every core computes and the runtime's bucket sums, started on a sync thread of each rank while its backward
  continues, are slowed to a few ms a call (they wait for a core); they end about where they would had they
  started after the backward (benchmarks/buckets.md run 8: two ranks on two cores, one sum per group in flight,
  the step within 7 % of "compute, then one call per sum"). `sums_overlap` is then False and the prediction starts every sum after its
  devices' backward (the simulator's ``overlap_sync=False``).

* **the fence** (the barrier that ends every measured step, `fence_ms`: the topology's measured barrier, a hot
  loop of small all-reduces): with every rank computing up to it, it is one small all-reduce right after every rank
  computed and costs ``call_ms["allreduce"]``; with one rank computing, the others wait in it on cores of their own
  and it costs the hot barrier. In between, ``between(fence_ms, max(fence_ms, call_ms["allreduce"]), c, n)``
  (`fence_after_compute_ms`).

``c`` comes from a first simulation without the terms; the second simulation with them is the prediction.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class ContentionTerms:
    """The contention figures of a profile (ms and dimensionless ratios; see the module docstring).

    ranks: how many ranks the probe ran at once; rows: the rows each of them stepped for `together_speed`;
    handoff_ms: resume latency after a wait; alone_stretch / together_stretch: wall / thread-CPU ms of compute
    with one rank computing / all at once (1.0 when `clock` is ``wall``: the op times already hold it);
    together_speed: step CPU ms all at once / alone; clock: ``thread`` or ``wall``, how the profile's op times
    were taken; call_ms: ((call kind, ms), ...) of one small collective call after compute, or None; cores: the
    cores the probe could use, or None; rank_speed: the probe's alone step over the step block's; quota_scale: the
    profile's CPU-quota factor (`tag.cost.profile_types.quota_scale`), which the stretches already hold (module
    docstring)."""

    ranks: int
    rows: int
    handoff_ms: float
    alone_stretch: float
    together_stretch: float
    together_speed: float
    clock: str = "thread"
    call_ms: tuple[tuple[str, float], ...] | None = None
    cores: int | None = None
    rank_speed: float = 1.0
    quota_scale: float = 1.0


def sums_overlap(terms: ContentionTerms | None, n_ranks: int) -> bool:
    """Whether bucket sums run while the backward continues, for a run of `n_ranks` one-thread ranks on the probe's
    machine: False when the profile knows its machine's cores and the ranks fill them (module docstring, cores).

    >>> t = ContentionTerms(2, 32, 0.2, 1.0, 1.0, 1.0, cores=2)
    >>> sums_overlap(t, 2), sums_overlap(t, 1), sums_overlap(None, 8)
    (False, True, True)
    """
    return terms is None or terms.cores is None or n_ranks < terms.cores


def concurrency(busy_ms, span_ms: float, n_ranks: int) -> tuple[float, int]:
    """(c, n): n = max(n_ranks, 2) and c = sum(busy_ms) / span_ms clamped to [1, n] (1 when the span is 0).
    `busy_ms`: per device compute-stream busy ms (a dict or a sequence); `span_ms`: the ms in which at least one
    device computes (`compute_span_ms`; the iteration's ms bounds it from above).

    >>> concurrency({"a": 30.0, "b": 15.0}, 30.0, 2)
    (1.5, 2)
    """
    busy = list(busy_ms.values()) if isinstance(busy_ms, dict) else list(busy_ms)
    n = max(int(n_ranks), 2)
    c = min(max(sum(busy) / span_ms, 1.0), float(n)) if span_ms > 0 else 1.0
    return c, n


def compute_span_ms(trace_events: list[dict]) -> float | None:
    """The ms in which at least one device computes: the length of the union of the compute process's task
    intervals in a simulated trace (Chrome trace events, times in us; the process named "compute"), None when the
    trace has none.

    >>> ev = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "compute"}},
    ...       {"ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": 3000.0}, {"ph": "X", "pid": 0, "tid": 1, "ts": 1000.0,
    ...       "dur": 3000.0}, {"ph": "X", "pid": 0, "tid": 0, "ts": 6000.0, "dur": 1000.0},
    ...       {"ph": "X", "pid": 1, "tid": 0, "ts": 4000.0, "dur": 2000.0}]
    >>> compute_span_ms(ev)  # [0, 4] and [6, 7] ms; the network process's [4, 6] is no compute
    5.0
    """
    pids = {e.get("pid") for e in trace_events if e.get("ph") == "M" and e.get("name") == "process_name"
            and (e.get("args") or {}).get("name") == "compute"}
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in trace_events
                   if e.get("ph") == "X" and e.get("pid") in pids and float(e.get("dur", 0.0)) > 0.0)
    if not spans:
        return None
    total, end = 0.0, -float("inf")
    for a, b in spans:  # sorted by start: each interval adds what it reaches past the union so far
        if b > end:
            total += b - max(a, end)
            end = b
    return total / 1e3


def between(alone: float, together: float, c: float, n: int) -> float:
    """``alone + (c - 1) / (n - 1) x (together - alone)``: a figure at concurrency c of n ranks.

    >>> between(1.0, 2.0, 1.5, 2)
    1.5
    """
    return alone + (c - 1.0) / (n - 1.0) * (together - alone)


def compute_scale(terms: ContentionTerms, c: float, n: int) -> float:
    """The factor on every compute and update time at concurrency c of n ranks: stretch x speed x rank speed.

    >>> compute_scale(ContentionTerms(2, 32, 0.2, 1.0, 1.2, 1.5), 2.0, 2)
    1.7999999999999998
    >>> compute_scale(ContentionTerms(2, 32, 0.2, 1.0, 1.0, 1.5, rank_speed=1.2), 1.0, 2)
    1.2
    >>> compute_scale(ContentionTerms(2, 32, 0.2, 2.0, 4.0, 1.0, quota_scale=2.0), 2.0, 2)
    2.0
    """
    stretch = between(terms.alone_stretch, terms.together_stretch, c, n) / terms.quota_scale \
        if terms.clock == "thread" else 1.0
    return stretch * between(1.0, terms.together_speed, c, n) * terms.rank_speed


def rank_speed(alone_step_ms: float | None, block_step_ms: float | None, clock: str) -> float:
    """``sqrt(alone_step_ms / block_step_ms)``: the model's step in a rank's process over the same step in the
    profile's step block, shrunk halfway to 1 in log space (module docstring); 1 when either figure is missing or not
    positive, or the clock is ``wall`` (the probe times thread CPU, a wall-clock step block is not comparable).

    >>> rank_speed(36.0, 25.0, "thread"), rank_speed(36.0, None, "thread"), rank_speed(36.0, 25.0, "wall")
    (1.2, 1.0, 1.0)
    """
    if clock != "thread":
        return 1.0
    return shrunk_ratio(alone_step_ms, block_step_ms)


def shrunk_ratio(now_ms: float | None, then_ms: float | None) -> float:
    """``sqrt(now_ms / then_ms)``: the ratio of two one-median timings of the same step on a machine whose speed
    drifts by about as much between them, shrunk halfway to 1 in log space (half of log r taken as signal: the
    least-squares estimate when signal and noise vary alike); 1 when either figure is missing or not positive. The
    rank speed above and deploy's speed check (`tag.profile.speed_check`) both use it.

    >>> shrunk_ratio(36.0, 25.0), shrunk_ratio(None, 25.0)
    (1.2, 1.0)
    """
    if not now_ms or not then_ms or now_ms <= 0 or then_ms <= 0:
        return 1.0
    return math.sqrt(float(now_ms) / float(then_ms))


def with_handoff(cluster, handoff_ms: float):
    """A copy of `cluster` whose latency between every two different devices is `handoff_ms` longer."""
    import numpy as np

    out = copy.copy(cluster)
    lat = np.array(cluster.latency_us, dtype=float, copy=True)
    lat[~np.eye(lat.shape[0], dtype=bool)] += 1e3 * handoff_ms
    out.latency_us = lat
    return out


def fence_after_compute_ms(terms: ContentionTerms | None, fence_ms: float, c: float, n: int) -> float:
    """The barrier ending a step at concurrency c of n ranks, ms: ``between(fence_ms, max(fence_ms, call), c, n)``
    with call = the profile's all-reduce call cost after compute (module docstring, the fence).

    >>> t = ContentionTerms(2, 32, 0.2, 1.0, 1.0, 1.0, call_ms=(("allreduce", 0.9),))
    >>> [fence_after_compute_ms(t, 0.25, c, 2) for c in (2.0, 1.0, 1.5)]
    [0.9, 0.25, 0.575]
    >>> fence_after_compute_ms(None, 0.25, 2.0, 2)
    0.25
    """
    calls = dict(terms.call_ms or ()) if terms is not None else {}
    return between(fence_ms, max(fence_ms, calls.get("allreduce", 0.0)), c, n)


@dataclass(frozen=True)
class DeployedStep:
    """A plan's predicted step as deploy runs it: step_ms (ms, with the fence); concurrency c of n ranks and the
    compute scale the contention terms gave (1.0 without terms); oom: the simulated memory does not fit (step_ms is
    then the time ignoring memory: deploy runs it anyway); overlap_sync: whether the prediction ran bucket sums
    while the backward continued."""

    step_ms: float
    concurrency: float
    n_ranks: int
    scale: float
    oom: bool
    overlap_sync: bool = True


def deployed_step_ms(simulate: Callable, gg, cluster, cost, strategy, training, *, terms: ContentionTerms | None,
                     n_ranks: int, fence_ms: float = 0.0, overlap_sync: bool = True) -> DeployedStep:
    """Predicted step of `strategy` as the deploy runtime runs it, ms (`DeployedStep`).

    `simulate` is `tag.sim.simulate` (passed in: the cost layer does not import the simulator); it runs with
    blocking exchanges (the runtime's exchanges are rendezvous) and `overlap_sync` (the runtime's bucket sums
    overlap the backward unless a split training-mode BatchNormalization forbids it, or `sums_overlap` says the
    ranks fill the machine's cores). With `terms`, a second run
    on ``cost.scaled(compute_scale(...))`` and the cluster `with_handoff` is the prediction (module docstring);
    `fence_ms` (the barrier that ends every measured step, raised by `fence_after_compute_ms`) is added.
    """
    overlap_sync = overlap_sync and sums_overlap(terms, n_ranks)

    def run(cl, cm, trace=False):
        res = simulate(gg, cl, cm, strategy, training, overlap_sync=overlap_sync, blocking_sends=True, trace=trace)
        ms = res.fit_iteration_ms if res.oom and res.fit_iteration_ms else res.iteration_ms
        return res, float(ms)

    res, ms = run(cluster, cost, trace=terms is not None)
    span = compute_span_ms(res.trace_events) if terms is not None else None
    c, n = concurrency(res.busy_ms, min(span, ms) if span else ms, n_ranks)
    scale = 1.0
    if terms is not None:
        scale = compute_scale(terms, c, n)
        res, ms = run(with_handoff(cluster, terms.handoff_ms), cost.scaled(scale))
    return DeployedStep(ms + fence_after_compute_ms(terms, fence_ms, c, n), c, n, scale, bool(res.oom), overlap_sync)

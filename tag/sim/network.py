"""Flow-level network: flows share directed links max-min fairly (progressive filling).

A flow crosses a set of directed links, each with a weight: the bytes it puts on that link per byte of
its own progress (1 for a point-to-point transfer; for a ring collective, the number of ring hops
whose route uses the link). All flows not limited elsewhere rise at the same rate until a link is
full; the flows on it freeze at that rate; repeat (weighted progressive filling, which gives the
max-min fair allocation). Rates are recomputed whenever a flow starts or drains. A flow's bytes drain
at its rate; its latency is added after it drains (the ``alpha`` of alpha-beta).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

INF = float("inf")


@dataclass
class Flow:
    """A transfer in flight: `volume_bytes` of progress over weighted directed links."""

    links: tuple[int, ...]
    weights: tuple[float, ...]
    volume_bytes: float
    latency_ms: float
    payload: object = None  # what to do on delivery (engine-defined)
    label: str = ""
    remaining_bytes: float = 0.0
    rate: float = 0.0  # bytes per ms of progress
    start_ms: float = 0.0
    seq: int = field(default=0, compare=False)


def max_min_rates(flows: list[Flow], caps_bytes_per_ms: list[float]) -> None:
    """Set each flow's `rate` (bytes/ms) to its weighted max-min fair share of the link capacities.

    Flows that share no link, directly or through other flows, do not affect each other's rates, so each
    connected component (`link_components`) is filled on its own: a flow alone gets min_l cap_l / w_l, the
    progressive filling then runs over the component's links only (a hierarchical sync's 128 chains inside
    128 machines are 128 one-flow components, not one 128-step filling over every link)."""
    if len(flows) == 1:
        _alone(flows[0], caps_bytes_per_ms)
        return
    for comp in link_components(flows):
        if len(comp) == 1:
            _alone(comp[0], caps_bytes_per_ms)
        elif len(comp) > 400:
            _max_min_rates_np(comp, caps_bytes_per_ms)
        else:
            _max_min_rates_py(comp, caps_bytes_per_ms)


def _alone(f: Flow, caps_bytes_per_ms) -> None:
    """The rate of a flow that shares none of its links: its narrowest link, min_l cap_l / w_l."""
    f.rate = min((caps_bytes_per_ms[l] / w for l, w in zip(f.links, f.weights)), default=INF)


def link_components(flows: list[Flow]) -> list[list[Flow]]:
    """The flows grouped into connected components of the flows-share-a-link relation (union-find over the
    links), each component in the flows' order, components ordered by their first flow."""
    parent = list(range(len(flows)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for i, f in enumerate(flows):
        for l in f.links:
            j = owner.setdefault(l, i)
            if j != i:
                a, b = root(i), root(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)  # the root stays the component's first flow
    comps: dict[int, list[Flow]] = {}
    for i, f in enumerate(flows):
        comps.setdefault(root(i), []).append(f)
    return list(comps.values())


def _max_min_rates_py(flows: list[Flow], caps_bytes_per_ms) -> None:
    """`max_min_rates` with dicts: raise all unfrozen flows to the lowest link saturation level, freeze."""
    rem: dict[int, float] = {}
    wsum: dict[int, float] = {}
    on_link: dict[int, list[Flow]] = {}
    for f in flows:
        for l, w in zip(f.links, f.weights):
            if l not in rem:
                rem[l] = caps_bytes_per_ms[l]
                wsum[l] = 0.0
                on_link[l] = []
            wsum[l] += w
            on_link[l].append(f)
    unfrozen = {id(f) for f in flows}
    level = 0.0
    while unfrozen:
        best, best_share = -1, INF
        for l, w in wsum.items():
            if w > 1e-12:
                share = rem[l] / w
                if share < best_share:
                    best, best_share = l, share
        if best < 0:  # remaining flows cross no link
            for f in flows:
                if id(f) in unfrozen:
                    f.rate = INF
            return
        level += best_share
        for l, w in wsum.items():
            if w > 1e-12:
                rem[l] -= best_share * w
        for f in on_link[best]:
            if id(f) in unfrozen:
                unfrozen.discard(id(f))
                f.rate = level
                for l, w in zip(f.links, f.weights):
                    wsum[l] -= w
        wsum[best] = 0.0


def _max_min_rates_np(flows: list[Flow], caps_bytes_per_ms) -> None:
    """`max_min_rates` with numpy arrays (same allocation; links that tie as bottleneck freeze together)."""
    counts = [len(f.links) for f in flows]
    link = np.fromiter((l for f in flows for l in f.links), dtype=np.int64, count=sum(counts))
    w = np.fromiter((x for f in flows for x in f.weights), dtype=float, count=len(link))
    fid = np.repeat(np.arange(len(flows)), counts)
    used, inv = np.unique(link, return_inverse=True)
    rem = np.asarray(caps_bytes_per_ms, dtype=float)[used]
    rates = np.full(len(flows), INF)
    live = np.ones(len(link), dtype=bool)
    frozen = np.zeros(len(flows), dtype=bool)
    level = 0.0
    while live.any():
        wsum = np.bincount(inv, weights=w * live, minlength=len(used))
        has = wsum > 1e-12
        share = np.full(len(used), INF)
        share[has] = rem[has] / wsum[has]
        m = share.min()
        level += m
        rem -= m * wsum
        bottleneck = has & (share <= m * (1 + 1e-12))
        hit = np.unique(fid[live & bottleneck[inv]])
        rates[hit] = level
        frozen[hit] = True
        live = ~frozen[fid]
    for f, r in zip(flows, rates.tolist()):
        f.rate = r


class Network:
    """The flows in flight over a cluster's directed links, advanced in time by the engine."""

    def __init__(self, caps_bytes_per_ms: list[float]):
        self.caps = caps_bytes_per_ms
        self.active: list[Flow] = []
        self.now = 0.0
        self._next = INF
        self._dirty = False

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt > 0:
            if self._dirty:
                self._recompute()
            for f in self.active:
                f.remaining_bytes -= f.rate * dt
        self.now = t

    def _recompute(self) -> None:
        self._dirty = False
        if self.active:
            max_min_rates(self.active, self.caps)
            self._next = min(self.now + max(f.remaining_bytes, 0.0) / f.rate for f in self.active)
        else:
            self._next = INF

    def add(self, flow: Flow, t: float) -> None:
        """Start `flow` at time t (ms); rates are recomputed lazily, once for flows starting together."""
        self._advance(t)
        flow.remaining_bytes = flow.volume_bytes
        flow.start_ms = t
        self.active.append(flow)
        self._dirty = True

    def next_drain_ms(self) -> float:
        """Time the next active flow drains (inf if none)."""
        if self._dirty:
            self._recompute()
        return self._next

    def pop_drained(self, t: float) -> list[Flow]:
        """Advance to t and remove the flows that have drained by then."""
        self._advance(t)
        done, keep = [], []
        for f in self.active:
            (done if f.remaining_bytes <= 1e-9 * f.volume_bytes + 1e-9 else keep).append(f)
        if not done:  # guard against rounding: drain the closest flow
            f = min(self.active, key=lambda f: f.remaining_bytes / f.rate)
            done, keep = [f], [g for g in self.active if g is not f]
        self.active = keep
        self._dirty = True
        return done

"""Flow-level network: flows share directed links max-min fairly (progressive filling).

A flow crosses a set of directed links, each with a weight: the bytes it puts on that link per byte of
its own progress (1 for a point-to-point transfer; for a ring collective, the number of ring hops
whose route uses the link). All flows not limited elsewhere rise at the same rate until a link is
full; the flows on it freeze at that rate; repeat (weighted progressive filling, which gives the
max-min fair allocation). Rates are recomputed whenever a flow starts or drains. A flow's bytes drain
at its rate; its latency is added after it drains (the ``alpha`` of alpha-beta).
"""

from __future__ import annotations

import heapq
from itertools import chain
from operator import attrgetter, truediv
from dataclasses import dataclass, field

import numpy as np

from tag.lru import Recent

INF = float("inf")


@dataclass(slots=True)
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
    alone_rate: float = field(default=0.0, compare=False, repr=False)  # `_alone`'s rate, computed once ...
    alone_caps: object = field(default=None, compare=False, repr=False)  # ... for these capacities


def max_min_rates(flows: list[Flow], caps_bytes_per_ms: list[float], memo: dict | None = None) -> None:
    """Set each flow's `rate` (bytes/ms) to its weighted max-min fair share of the link capacities.

    Flows that share no link, directly or through other flows, do not affect each other's rates, so each
    connected component (`link_components`) is filled on its own: a flow alone gets min_l cap_l / w_l, the
    progressive filling then runs over the component's links only (a hierarchical sync's 128 chains inside
    128 machines are 128 one-flow components, not one 128-step filling over every link).

    memo (`rate_memo`, for these capacities): the rates of several flows are a function of their (links, weights)
    in order and the capacities alone, so a set of flows met before (a ring's phases, the same sync in the next
    strategy: about 8 in 9 recomputations on the datasets cases) takes its rates from there."""
    if len(flows) == 1:
        _alone(flows[0], caps_bytes_per_ms)
        return
    if memo is not None and len(flows) <= _MEMO_MAX_FLOWS:
        _memoised(flows, caps_bytes_per_ms, memo, _shared_rates)
        return
    _shared_rates(flows, caps_bytes_per_ms)


_MEMO_MAX_FLOWS = 400  # beyond this the key costs about what the numpy filling does
_MEMO_MAX_ENTRIES = 50_000
_RATE_MEMOS: Recent = Recent(8)  # capacities -> {((links, weights) per flow, in order): rates}
_links_weights = attrgetter("links", "weights")


def rate_memo(caps_bytes_per_ms) -> dict:
    """The memo of `max_min_rates` for links of these capacities (one per distinct capacity vector, kept across
    simulations of the same cluster)."""
    key = tuple(caps_bytes_per_ms)
    memo = _RATE_MEMOS.get(key)
    return memo if memo is not None else _RATE_MEMOS.put(key, {})


def _memoised(flows: list[Flow], caps_bytes_per_ms, memo: dict, fill) -> None:
    """`fill(flows, caps)`'s rates, from `memo` when these flows' (links, weights) were filled before."""
    key = tuple(map(_links_weights, flows))
    rates = memo.get(key)
    if rates is None:
        fill(flows, caps_bytes_per_ms)
        if len(memo) >= _MEMO_MAX_ENTRIES:
            memo.clear()
        memo[key] = tuple([f.rate for f in flows])
        return
    for f, r in zip(flows, rates):
        f.rate = r


def _shared_rates(flows: list[Flow], caps_bytes_per_ms) -> None:
    """`max_min_rates` of two or more flows, without the memo."""
    links = list(chain.from_iterable(map(_links_of, flows)))
    if len(set(links)) == len(links):  # no link shared: every flow alone
        for f in flows:
            _alone(f, caps_bytes_per_ms)
        return
    if len(flows) > 400:  # numpy fills every component at once, one step per distinct level
        _max_min_rates_np(flows, caps_bytes_per_ms)
        return
    for comp in link_components(flows):
        if len(comp) == 1:
            _alone(comp[0], caps_bytes_per_ms)
        elif len(comp) > 400:
            _max_min_rates_np(comp, caps_bytes_per_ms)
        else:
            _max_min_rates_py(comp, caps_bytes_per_ms)


_links_of = attrgetter("links")


def _alone(f: Flow, caps_bytes_per_ms) -> None:
    """The rate of a flow that shares none of its links: its narrowest link, min_l cap_l / w_l (kept on the flow,
    which asks again at every recomputation while it is alone)."""
    if f.alone_caps is not caps_bytes_per_ms:
        f.alone_rate = min(map(truediv, map(caps_bytes_per_ms.__getitem__, f.links), f.weights), default=INF)
        f.alone_caps = caps_bytes_per_ms
    f.rate = f.alone_rate


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
    """`max_min_rates` by progressive filling with a heap of link saturation levels.

    While every unfrozen flow runs at the common level x, link l carries load_l + x W_l (load_l: the frozen flows'
    w x rate on it, W_l: the unfrozen flows' weights), so it saturates at x_l = (cap_l - load_l) / W_l; x_l changes
    only when a flow on l freezes. Pop the lowest x_l (a stale entry is skipped by its version), freeze the
    unfrozen flows on l at x_l, update load and W of their links and push their new levels:
    O(sum of links per flow x log links) instead of a scan of every link per bottleneck."""
    load: dict[int, float] = {}
    wsum: dict[int, float] = {}
    on_link: dict[int, list[int]] = {}
    for i, f in enumerate(flows):
        for l, w in zip(f.links, f.weights):
            if l in wsum:
                wsum[l] += w
                on_link[l].append(i)
            else:
                load[l], wsum[l], on_link[l] = 0.0, w, [i]
    version = dict.fromkeys(wsum, 0)
    heap = [(caps_bytes_per_ms[l] / w, l, 0) for l, w in wsum.items() if w > 1e-12]
    heapq.heapify(heap)
    frozen = [False] * len(flows)
    left, level = len(flows), 0.0
    while left and heap:
        x, l, v = heapq.heappop(heap)
        if v != version[l]:
            continue
        level = max(level, x)  # levels only rise (guards rounding)
        touched = []
        for i in on_link[l]:
            if frozen[i]:
                continue
            frozen[i] = True
            left -= 1
            f = flows[i]
            f.rate = level
            for l2, w2 in zip(f.links, f.weights):
                load[l2] += w2 * level
                wsum[l2] -= w2
                touched.append(l2)
        for l2 in dict.fromkeys(touched):
            version[l2] += 1
            if l2 != l and wsum[l2] > 1e-12:
                heapq.heappush(heap, (max(caps_bytes_per_ms[l2] - load[l2], 0.0) / wsum[l2], l2, version[l2]))
    if left:  # flows that cross no link
        for i, f in enumerate(flows):
            if not frozen[i]:
                f.rate = INF


def _max_min_rates_np(flows: list[Flow], caps_bytes_per_ms) -> None:
    """`max_min_rates` with numpy arrays (same allocation; links that tie as bottleneck freeze together)."""
    counts = [len(f.links) for f in flows]
    link = np.fromiter(chain.from_iterable(map(attrgetter("links"), flows)), dtype=np.int64, count=sum(counts))
    w = np.fromiter(chain.from_iterable(map(attrgetter("weights"), flows)), dtype=float, count=len(link))
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


def _first_drain_ms(flows, now: float) -> float:
    """min over `flows` of now + max(remaining_bytes, 0) / rate: when the first of them drains at their rates (a plain
    loop: this runs at every recomputation)."""
    first = INF
    for f in flows:
        r = f.remaining_bytes
        t = now + (r if r > 0.0 else 0.0) / f.rate
        if t < first:
            first = t
    return first


class Network:
    """The flows in flight over a cluster's directed links, advanced in time by the engine.

    When few of many flows in flight changed since the last recomputation (less than half of more than `SMALL`),
    rates are recomputed only for the flows connected, through shared links, to a link whose flows changed (a
    flow started or drained on it): other components keep their allocation, which is max-min fair on its own
    (`max_min_rates`). Otherwise (a data-parallel sync's one ring; a phase of 128 chains that start together)
    all are recomputed and the per-link index is dropped until it is needed again."""

    SMALL = 8

    def __init__(self, caps_bytes_per_ms: list[float]):
        self.caps = caps_bytes_per_ms
        self.memo = rate_memo(caps_bytes_per_ms)  # `max_min_rates`' rates of flow sets met before
        self.active: dict[int, Flow] = {}  # by seq, in start order
        self.on_link: dict[int, dict[int, Flow]] | None = None  # link -> its flows by seq (many flows only)
        self.changed: dict[int, None] = {}  # links whose flows changed since the last recomputation
        self.now = 0.0
        self._next = INF
        self._seq = 0
        self._n_changed = 0  # flows started or drained since the last recomputation

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt > 0:
            if self.changed:
                self._recompute()
            for f in self.active.values():
                f.remaining_bytes -= f.rate * dt
        self.now = t

    def _affected(self) -> list[list[Flow]]:
        """The connected components (flows linked through shared links) that hold a changed link, each in start
        order."""
        on_link, seen_links, comps = self.on_link, set(), []
        for l0 in self.changed:
            if l0 in seen_links:
                continue
            seen_links.add(l0)
            links, comp = [l0], {}
            while links:
                for q, f in on_link[links.pop()].items():
                    if q not in comp:
                        comp[q] = f
                        for l in f.links:
                            if l not in seen_links:
                                seen_links.add(l)
                                links.append(l)
            if comp:
                comps.append([comp[q] for q in sorted(comp)])
        return comps

    def _index(self) -> None:
        """Build the link -> flows index from the flows in flight; every link of theirs counts as changed."""
        self.on_link = {}
        for q, f in self.active.items():
            for l in f.links:
                self.on_link.setdefault(l, {})[q] = f
        self.changed = dict.fromkeys(self.on_link)

    def _recompute(self) -> None:
        n = len(self.active)
        if n <= self.SMALL or 2 * self._n_changed >= n:
            self.on_link = None
            if self.active:
                max_min_rates(list(self.active.values()), self.caps, self.memo)
                self._next = _first_drain_ms(self.active.values(), self.now)
            else:
                self._next = INF
        else:
            if self.on_link is None:
                self._index()
            caps, memo = self.caps, self.memo
            for comp in self._affected():
                if len(comp) == 1:
                    _alone(comp[0], caps)
                elif len(comp) > 400:
                    _max_min_rates_np(comp, caps)
                else:
                    _memoised(comp, caps, memo, _max_min_rates_py)
            self._next = _first_drain_ms(self.active.values(), self.now)
        self.changed = {}
        self._n_changed = 0

    def add(self, flow: Flow, t: float) -> None:
        """Start `flow` at time t (ms); rates are recomputed lazily, once for flows starting together."""
        self._advance(t)
        flow.remaining_bytes = flow.volume_bytes
        flow.start_ms = t
        self._seq += 1
        flow.seq = self._seq
        self.active[flow.seq] = flow
        self._n_changed += 1
        if self.on_link is None:
            self.changed[-1] = None  # a recomputation is due (without the index every flow is recomputed)
            return
        for l in flow.links:
            self.on_link.setdefault(l, {})[flow.seq] = flow  # links stay keyed once used
            self.changed[l] = None

    def next_drain_ms(self) -> float:
        """Time the next active flow drains (inf if none)."""
        if self.changed:
            self._recompute()
        return self._next

    def pop_drained(self, t: float) -> list[Flow]:
        """Advance to t and remove the flows that have drained by then."""
        self._advance(t)
        done = [f for f in self.active.values() if f.remaining_bytes <= 1e-9 * f.volume_bytes + 1e-9]
        if not done:  # guard against rounding: drain the closest flow
            done = [min(self.active.values(), key=lambda f: f.remaining_bytes / f.rate)]
        self._n_changed += len(done)
        for f in done:
            del self.active[f.seq]
            if self.on_link is None:
                self.changed[-1] = None
                continue
            for l in f.links:
                del self.on_link[l][f.seq]
                self.changed[l] = None
        return done

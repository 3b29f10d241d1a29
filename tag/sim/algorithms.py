"""Collective algorithms by cost: the time of one sync alone on the cluster, and NCCL-style choice among them.

`algorithm_ms` is the time the event loop (`tag.sim.events`) gives a sync of `nbytes` over `devices` by `method`
when nothing else is on the network: the sum over its phases (`tag.sim.collectives.sync_phases`) of each
phase's time, where a phase lasts until its last flow has drained and its latency has passed. Flows of a phase
that share no link each drain at ``min_l cap_l / w_l`` (closed form); flows that share links are drained by the
same max-min progressive filling the network uses (`tag.sim.network.max_min_rates`), recomputed at each drain.

`choose_algorithm` picks, as NCCL's tuner does per call (``ncclTopoGetAlgoTime`` in NVIDIA/nccl
``src/graph/tuning.cc``), the algorithm of least time among ``ring``, ``tree`` and, when the devices span at least
two machines and some machine holds at least two of them, ``hierarchical``; ties go to the earlier of that order.
Small messages on many machines go to the tree (2 log2(k) latency steps instead of the ring's 2(n-1)), large
ones to the ring or the hierarchical form (less traffic through each NIC).

>>> from tag.topology.loader import parse_topology
>>> two = parse_topology({"version": 1, "machines": [
...     {"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": 1}], "nic_bandwidth_gbps": 100}
...     for i in range(2)]}, "two")
>>> round(algorithm_ms("ring", two, (0, 1), 1.25e7), 6)  # S / 12.5e6 B/ms + 2 steps x 10 us
1.02
"""

from __future__ import annotations

from tag.sim.collectives import FlowSpec, machine_members, sync_phases
from tag.sim.network import Flow, max_min_rates
from tag.strategy import BY_COST  # candidates of `choose_algorithm`, in tie-break order
from tag.topology.cluster import Cluster


def phase_ms(cluster: Cluster, specs: list[FlowSpec]) -> float:
    """Time of one phase alone on the network, ms: max over its flows of (drain time + latency)."""
    caps = [l.bytes_per_ms for l in cluster.links]
    moving, end = [], 0.0
    for s in specs:
        if s.links and s.volume_bytes > 0:
            moving.append(s)
        else:
            end = max(end, s.latency_ms)
    seen: set[int] = set()
    disjoint = True
    for s in moving:
        if seen.intersection(s.links):
            disjoint = False
            break
        seen.update(s.links)
    if disjoint:
        for s in moving:
            rate = min(caps[l] / w for l, w in zip(s.links, s.weights))
            end = max(end, s.volume_bytes / rate + s.latency_ms)
        return end
    flows = [Flow(s.links, s.weights, s.volume_bytes, s.latency_ms, remaining_bytes=s.volume_bytes) for s in moving]
    now = 0.0
    while flows:
        max_min_rates(flows, caps)
        dt = min(f.remaining_bytes / f.rate for f in flows)
        now += dt
        keep = []
        for f in flows:
            f.remaining_bytes -= f.rate * dt
            if f.remaining_bytes <= 1e-9 * f.volume_bytes + 1e-9:
                end = max(end, now + f.latency_ms)
            else:
                keep.append(f)
        flows = keep
    return end


def algorithm_ms(method: str, cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                 server: int | None = None, ring_gbps: float | None = None, step_us: float | None = None,
                 call_ms: dict | None = None) -> float:
    """Time of one sync of `nbytes` over `devices` by `method` alone on the network, ms (module docstring;
    `ring_gbps`, `step_us`, `call_ms`: the measured terms of `tag.sim.collectives.sync_phases`)."""
    return sum(phase_ms(cluster, ph)
               for ph in sync_phases(method, cluster, devices, nbytes, server, ring_gbps, step_us, call_ms))


def candidates(cluster: Cluster, devices: tuple[int, ...]) -> tuple[str, ...]:
    """The algorithms `choose_algorithm` weighs for `devices`: ring and tree, and hierarchical when the devices
    span >= 2 machines and some machine holds >= 2 of them."""
    sizes = [len(m) for m in machine_members(cluster, devices)]
    if len(sizes) >= 2 and max(sizes) >= 2:
        return BY_COST
    return BY_COST[:2]


def choose_algorithm(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                     ring_gbps: float | None = None, step_us: float | None = None,
                     call_ms: dict | None = None) -> str:
    """The cheapest of `candidates` for a sync of `nbytes` over `devices` by `algorithm_ms` (ties: ring, tree,
    hierarchical, in that order)."""
    best, best_ms = "ring", float("inf")
    for method in candidates(cluster, devices):
        t = algorithm_ms(method, cluster, devices, nbytes, None, ring_gbps, step_us, call_ms)
        if t < best_ms:
            best, best_ms = method, t
    return best

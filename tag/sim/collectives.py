"""Gradient sync as phases of flows routed over the cluster (what each sync method puts on the wire).

A collective is a list of phases; a phase is a list of `FlowSpec`s that run concurrently; a phase starts
when the previous one has delivered. Ring collectives are one weighted flow (a "coflow") whose hops
progress in lockstep, as a ring's pipelined steps do: it crosses, for every ring hop a -> b, the links of
``routes[a][b]``, each link weighted by the number of hops that use it, and it carries the per-hop volume
of the algorithm (`tag.cost.comm`). Alone on uncontended links of bandwidth B and latency alpha its time
is exactly the textbook formula; two rings that share a link split it max-min fairly.

* ``allreduce``: one ring coflow over the replicas in topology order, volume 2(n-1)/n x S, latency
  2(n-1) x (largest hop latency).
* ``hierarchical``: (1) in each machine, a chain reduce towards the machine leader (its first replica),
  volume S, latency the sum of hop latencies; (2) a ring all-reduce across the leaders; (3) a chain
  broadcast from each leader. Machines run phases (1) and (3) in parallel.
* ``ps``: (1) push: every replica other than the server sends S to the server (incast: they share the
  server's links); (2) pull: the server sends S to each. A tensor's pull waits for its push.
* ``allgather`` (for sufficient factors): one ring coflow, volume (n-1)/n x S_total.
"""

from __future__ import annotations

from dataclasses import dataclass

from tag.cost import comm
from tag.topology.cluster import Cluster


@dataclass(frozen=True)
class FlowSpec:
    """A flow to start: directed links with weights (bytes per byte of progress), its volume in bytes, the
    latency added after it drains (ms), and its first and last device (for labels)."""

    links: tuple[int, ...]
    weights: tuple[float, ...]
    volume_bytes: float
    latency_ms: float
    src: int  # first device (for labels)
    dst: int


def p2p_spec(cluster: Cluster, src: int, dst: int, nbytes: float) -> FlowSpec:
    """A point-to-point transfer of `nbytes` from device src to dst over its route."""
    route = cluster.routes[src][dst]
    return FlowSpec(tuple(route), (1.0,) * len(route), float(nbytes), float(cluster.latency_us[src][dst]) / 1e3, src, dst)


def _coflow(cluster: Cluster, hops: list[tuple[int, int]], volume: float, latency_ms: float) -> FlowSpec:
    w: dict[int, float] = {}
    for a, b in hops:
        for l in cluster.routes[a][b]:
            w[l] = w.get(l, 0.0) + 1.0
    links = tuple(sorted(w))
    return FlowSpec(links, tuple(w[l] for l in links), float(volume), latency_ms, hops[0][0], hops[-1][1])


def ring_spec(cluster: Cluster, devices: tuple[int, ...], volume: float, steps: int) -> FlowSpec:
    """A ring coflow over `devices` (in the given order): per-hop `volume`, `steps` x largest hop latency."""
    n = len(devices)
    hops = [(devices[i], devices[(i + 1) % n]) for i in range(n)]
    alpha_ms = max(float(cluster.latency_us[a][b]) for a, b in hops) / 1e3
    return _coflow(cluster, hops, volume, steps * alpha_ms)


def chain_spec(cluster: Cluster, chain: list[int], nbytes: float) -> FlowSpec:
    """A pipelined chain chain[0] -> chain[1] -> ... carrying `nbytes`; latency is the sum of hops."""
    hops = list(zip(chain, chain[1:]))
    lat_ms = sum(float(cluster.latency_us[a][b]) for a, b in hops) / 1e3
    return _coflow(cluster, hops, nbytes, lat_ms)


def allreduce_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float) -> list[list[FlowSpec]]:
    """Ring all-reduce of `nbytes` over `devices` (topology order)."""
    n = len(devices)
    if n < 2:
        return []
    return [[ring_spec(cluster, devices, comm.ring_allreduce_volume_bytes(nbytes, n), comm.ring_allreduce_steps(n))]]


def allgather_phases(cluster: Cluster, devices: tuple[int, ...], total_bytes: float) -> list[list[FlowSpec]]:
    """Ring all-gather whose gathered result has `total_bytes`."""
    n = len(devices)
    if n < 2:
        return []
    return [[ring_spec(cluster, devices, comm.allgather_volume_bytes(total_bytes, n), n - 1)]]


def hierarchical_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float) -> list[list[FlowSpec]]:
    """Chain reduce in each machine, ring all-reduce across machine leaders, chain broadcast back."""
    by_machine: dict[str, list[int]] = {}
    for d in devices:
        by_machine.setdefault(cluster.devices[d].machine, []).append(d)
    members = list(by_machine.values())
    leaders = tuple(m[0] for m in members)
    reduce = [chain_spec(cluster, m[::-1], nbytes) for m in members if len(m) > 1]
    bcast = [chain_spec(cluster, m, nbytes) for m in members if len(m) > 1]
    phases = [reduce] if reduce else []
    phases += allreduce_phases(cluster, leaders, nbytes)
    if bcast:
        phases.append(bcast)
    return phases


def ps_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float, server: int) -> list[list[FlowSpec]]:
    """Push to `server` from every other replica, then pull back."""
    workers = [d for d in devices if d != server]
    if not workers:
        return []
    push = [p2p_spec(cluster, d, server, nbytes) for d in workers]
    pull = [p2p_spec(cluster, server, d, nbytes) for d in workers]
    return [push, pull]


def sync_phases(method: str, cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                server: int | None = None) -> list[list[FlowSpec]]:
    """The phases of one gradient sync of `nbytes` over `devices` by `method`."""
    if method == "hierarchical":
        return hierarchical_phases(cluster, devices, nbytes)
    if method == "ps":
        return ps_phases(cluster, devices, nbytes, devices[0] if server is None else server)
    if method == "allgather":
        return allgather_phases(cluster, devices, nbytes)
    return allreduce_phases(cluster, devices, nbytes)

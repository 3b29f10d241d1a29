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

**Measured collective rate** (`ring_gbps`, optional): a collective library's ring can be slower per hop than
its links carry point to point (both directions of a hop share the ranks' cores, plus the reduction: gloo on
loopback moves 13.6 Gbit/s per ring hop against 42.3 point to point). When the cost model offers one
(`collective_hop_gbps`), a ring coflow whose uncontended rate ``min_l cap_l / w_l`` exceeds it carries
``volume x that rate / ring_gbps`` bytes instead: alone it then takes exactly ``volume / ring_gbps``, and it
still shares its links max-min fairly with other flows. None (every cost model without the method) leaves
the rings as above.
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


def ring_spec(cluster: Cluster, devices: tuple[int, ...], volume: float, steps: int,
              ring_gbps: float | None = None) -> FlowSpec:
    """A ring coflow over `devices` (in the given order): per-hop `volume` bytes, `steps` x largest hop
    latency; with `ring_gbps` (measured per-hop rate, 10^9 bit/s) capped at that rate (module docstring)."""
    n = len(devices)
    hops = [(devices[i], devices[(i + 1) % n]) for i in range(n)]
    alpha_ms = max(float(cluster.latency_us[a][b]) for a, b in hops) / 1e3
    spec = _coflow(cluster, hops, volume, steps * alpha_ms)
    if ring_gbps is None or ring_gbps <= 0 or not spec.links:
        return spec
    free_rate = min(cluster.links[l].bytes_per_ms / w for l, w in zip(spec.links, spec.weights))
    cap = comm.bytes_per_ms(ring_gbps)
    if free_rate <= cap:
        return spec
    return FlowSpec(spec.links, spec.weights, spec.volume_bytes * free_rate / cap, spec.latency_ms, spec.src, spec.dst)


def chain_spec(cluster: Cluster, chain: list[int], nbytes: float) -> FlowSpec:
    """A pipelined chain chain[0] -> chain[1] -> ... carrying `nbytes`; latency is the sum of hops."""
    hops = list(zip(chain, chain[1:]))
    lat_ms = sum(float(cluster.latency_us[a][b]) for a, b in hops) / 1e3
    return _coflow(cluster, hops, nbytes, lat_ms)


def allreduce_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                     ring_gbps: float | None = None) -> list[list[FlowSpec]]:
    """Ring all-reduce of `nbytes` over `devices` (topology order)."""
    n = len(devices)
    if n < 2:
        return []
    return [[ring_spec(cluster, devices, comm.ring_allreduce_volume_bytes(nbytes, n), comm.ring_allreduce_steps(n),
                       ring_gbps)]]


def allgather_phases(cluster: Cluster, devices: tuple[int, ...], total_bytes: float,
                     ring_gbps: float | None = None) -> list[list[FlowSpec]]:
    """Ring all-gather whose gathered result has `total_bytes`."""
    n = len(devices)
    if n < 2:
        return []
    return [[ring_spec(cluster, devices, comm.allgather_volume_bytes(total_bytes, n), n - 1, ring_gbps)]]


def hierarchical_phases(cluster: Cluster, devices: tuple[int, ...], nbytes: float,
                        ring_gbps: float | None = None) -> list[list[FlowSpec]]:
    """Chain reduce in each machine, ring all-reduce across machine leaders, chain broadcast back."""
    by_machine: dict[str, list[int]] = {}
    for d in devices:
        by_machine.setdefault(cluster.devices[d].machine, []).append(d)
    members = list(by_machine.values())
    leaders = tuple(m[0] for m in members)
    reduce = [chain_spec(cluster, m[::-1], nbytes) for m in members if len(m) > 1]
    bcast = [chain_spec(cluster, m, nbytes) for m in members if len(m) > 1]
    phases = [reduce] if reduce else []
    phases += allreduce_phases(cluster, leaders, nbytes, ring_gbps)
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
                server: int | None = None, ring_gbps: float | None = None) -> list[list[FlowSpec]]:
    """The phases of one gradient sync of `nbytes` over `devices` by `method` (`ring_gbps`: the measured
    per-hop rate of ring collectives, or None; see the module docstring)."""
    if method == "hierarchical":
        return hierarchical_phases(cluster, devices, nbytes, ring_gbps)
    if method == "ps":
        return ps_phases(cluster, devices, nbytes, devices[0] if server is None else server)
    if method == "allgather":
        return allgather_phases(cluster, devices, nbytes, ring_gbps)
    return allreduce_phases(cluster, devices, nbytes, ring_gbps)

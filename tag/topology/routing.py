"""The network graph of a validated topology, its routes and the bandwidth / latency matrices.

Network model (nodes are devices ``m0/0``, machines' internal fabrics ``m0``, named switches and the
implicit switch ``<switch>``); every physical link is full duplex and appears as two directed `Link`s,
``2k`` (a -> b) and ``2k + 1`` (b -> a), in this order:

1. one **device port** per device, device <-> its machine's fabric, at the machine's `intra_bandwidth_gbps`
   with latency ``intra_latency_us / 2`` (default 1 us, so device -> fabric -> device inside a machine is
   2 us end to end);
2. one **NIC link** per machine that hangs off the implicit switch, machine <-> ``<switch>``, at its
   `nic_bandwidth_gbps` with latency `nic_latency_us` (default 4 us; so two devices on two machines talk
   at the smaller NIC with 1 + 4 + 4 + 1 = 10 us end to end). A machine hangs off the implicit switch
   when it has a NIC and no link to a named switch; the implicit switch exists only when at least two
   machines hang off it;
3. the file's **explicit links**, in file order, with their `latency_us` (default 8 us between two
   machines, so a direct pair is also 10 us end to end; 4 us when a switch is at one end; 1 us when a
   device is at one end, e.g. an NVLink bridge between two GPUs).

Routes are shortest paths from each device: fewest hops first, then the widest (largest narrowest link),
ties broken by the node order (devices in topology order, machines, switches, implicit switch) and the
link order. Devices are end points only, never transit nodes. A route's bandwidth is its narrowest link
and its latency the sum of its links' latencies.
"""

from __future__ import annotations

import numpy as np

from tag.errors import InputError
from tag.topology.cluster import Cluster, Device, Link, Machine
from tag.topology.schema import IMPLICIT_SWITCH, TopologySpec


def build_links(spec: TopologySpec) -> tuple[list[Link], list[str]]:
    """The directed links (each physical link twice) and the node order of `spec`'s network graph."""
    physical: list[tuple[str, str, float, float]] = []
    for m in spec.machines:
        n = sum(c for _, c in m.devices)
        for k in range(n):
            physical.append((f"{m.name}/{k}", m.name, m.intra_bandwidth_gbps, m.intra_latency_us / 2.0))
    switch_set = set(spec.switches)
    on_named_switch = {end for l in spec.links for end, other in ((l.a, l.b), (l.b, l.a)) if other in switch_set}
    attached = [m for m in spec.machines if m.nic_bandwidth_gbps is not None and m.name not in on_named_switch]
    if len(attached) >= 2:
        for m in attached:
            physical.append((m.name, IMPLICIT_SWITCH, m.nic_bandwidth_gbps, m.nic_latency_us))
    for l in spec.links:
        physical.append((l.a, l.b, l.bandwidth_gbps, l.latency_us))
    links: list[Link] = []
    for a, b, bw, lat in physical:
        links.append(Link(a, b, bw, lat))
        links.append(Link(b, a, bw, lat))
    nodes = list(spec.device_ids) + [m.name for m in spec.machines] + list(spec.switches)
    if len(attached) >= 2:
        nodes.append(IMPLICIT_SWITCH)
    return links, nodes


def widest_fewest_hop_tree(source: int, adjacency: list[list[tuple[int, int]]], links: list[Link],
                           is_terminal: list[bool]) -> tuple[list[int], list[float]]:
    """Predecessor link per node on the fewest-hop, then widest, paths from node `source`.

    `adjacency[u]` lists (neighbour node, directed link index u -> neighbour) in tie-break order;
    terminal nodes (devices) are reached but not expanded unless they are the source.
    Returns (pred_link, width_gbps) per node; pred_link is -1 for the source and unreached nodes,
    width_gbps the narrowest link on the chosen path (inf for the source, 0 when unreached).
    """
    n = len(adjacency)
    dist = [-1] * n
    pred = [-1] * n
    width = [0.0] * n
    dist[source], width[source] = 0, float("inf")
    layer = [source]
    while layer:
        nxt: list[int] = []
        for u in layer:
            if is_terminal[u] and u != source:
                continue
            for v, li in adjacency[u]:
                if dist[v] == -1:
                    dist[v] = dist[u] + 1
                    nxt.append(v)
                if dist[v] == dist[u] + 1:
                    w = min(width[u], links[li].bandwidth_gbps)
                    if w > width[v]:
                        width[v], pred[v] = w, li
        layer = sorted(nxt)
    return pred, width


def build_cluster(spec: TopologySpec) -> Cluster:
    """The `Cluster` of a validated spec: devices, machines, directed links, routes and matrices.

    Raises `InputError` naming the first pair of devices with no route.
    """
    devices: list[Device] = []
    machines: list[Machine] = []
    for m in spec.machines:
        start = len(devices)
        local = 0
        for tname, count in m.devices:
            for _ in range(count):
                devices.append(Device(id=f"{m.name}/{local}", index=len(devices), machine=m.name,
                                      local_index=local, type=spec.device_types[tname]))
                local += 1
        machines.append(Machine(m.name, tuple(range(start, len(devices))), m.intra_bandwidth_gbps, m.nic_bandwidth_gbps))

    links, nodes = build_links(spec)
    node_index = {name: i for i, name in enumerate(nodes)}
    adjacency: list[list[tuple[int, int]]] = [[] for _ in nodes]
    for li, link in enumerate(links):
        adjacency[node_index[link.src]].append((node_index[link.dst], li))
    for adj in adjacency:
        adj.sort()
    n_dev = len(devices)
    is_terminal = [i < n_dev for i in range(len(nodes))]

    routes: list[list[tuple[int, ...]]] = [[() for _ in range(n_dev)] for _ in range(n_dev)]
    bandwidth = np.full((n_dev, n_dev), np.inf)
    latency = np.zeros((n_dev, n_dev))
    for s in range(n_dev):
        pred, width = widest_fewest_hop_tree(s, adjacency, links, is_terminal)
        for t in range(n_dev):
            if t == s:
                continue
            if pred[t] == -1:
                _unreachable(spec, devices[s], devices[t])
            path = []
            v = t
            while v != s:
                li = pred[v]
                path.append(li)
                v = node_index[links[li].src]
            path.reverse()
            routes[s][t] = tuple(path)
            bandwidth[s, t] = width[t]
            latency[s, t] = sum(links[li].latency_us for li in path)
    return Cluster(name=spec.name, devices=devices, machines=machines, links=links, routes=routes,
                   bandwidth_gbps=bandwidth, latency_us=latency, source=spec.source)


def _unreachable(spec: TopologySpec, a: Device, b: Device) -> None:
    where = next(m.where for m in spec.machines if m.name == b.machine)
    raise InputError(spec.source, where, f"a route from device {a.id} to device {b.id} (NICs, links and switches "
                     "must connect every pair of devices)", "no route")

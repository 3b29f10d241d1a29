"""A JSON-ready summary of a `Cluster` for `tag inspect TOPOLOGY.json`."""

from __future__ import annotations

import numpy as np

from tag.topology.cluster import Cluster


def _route_entry(cluster: Cluster, i: int, j: int) -> dict:
    return {"from": cluster.devices[i].id, "to": cluster.devices[j].id,
            "bandwidth_gbps": float(cluster.bandwidth_gbps[i, j]), "latency_us": float(cluster.latency_us[i, j]),
            "hops": len(cluster.routes[i][j])}


def summary(cluster: Cluster) -> dict:
    """Counts, totals, per-machine and per-device rows and the slowest / fastest routes of `cluster`.

    Keys: name, machines (int), devices (int), total_peak_tflops (FP32, 10^12 FLOP/s), total_memory_gb,
    device_types ({type: count}), switches (named and implicit switch nodes), links (physical links),
    machine_list, device_list, slowest_route and fastest_route (lowest / highest bandwidth, then highest /
    lowest latency; None with one device), min/max inter-device bandwidth_gbps.
    """
    n = cluster.n_devices
    types: dict[str, int] = {}
    for d in cluster.devices:
        types[d.type.name] = types.get(d.type.name, 0) + 1
    device_nodes = {d.id for d in cluster.devices}
    machine_nodes = {m.name for m in cluster.machines}
    switch_nodes = sorted({end for l in cluster.links for end in (l.src, l.dst)} - device_nodes - machine_nodes)
    machine_list = []
    for m in cluster.machines:
        devs = [cluster.devices[i] for i in m.device_indices]
        mtypes: dict[str, int] = {}
        for d in devs:
            mtypes[d.type.name] = mtypes.get(d.type.name, 0) + 1
        machine_list.append({"name": m.name, "devices": len(devs), "device_types": mtypes,
                             "peak_tflops": sum(d.type.peak_tflops for d in devs),
                             "memory_gb": sum(d.type.memory_gb for d in devs),
                             "intra_bandwidth_gbps": m.intra_bandwidth_gbps, "nic_bandwidth_gbps": m.nic_bandwidth_gbps})
    out = {
        "name": cluster.name,
        "machines": len(cluster.machines),
        "devices": n,
        "total_peak_tflops": round(sum(d.type.peak_tflops for d in cluster.devices), 6),
        "total_memory_gb": round(sum(d.type.memory_gb for d in cluster.devices), 6),
        "device_types": types,
        "switches": switch_nodes,
        "links": len(cluster.links) // 2,
        "machine_list": machine_list,
        "device_list": [{"id": d.id, "index": d.index, "machine": d.machine, "type": d.type.name,
                         "peak_tflops": d.type.peak_tflops, "memory_gb": d.type.memory_gb} for d in cluster.devices],
        "slowest_route": None,
        "fastest_route": None,
        "min_bandwidth_gbps": None,
        "max_bandwidth_gbps": None,
    }
    if n >= 2:
        off = ~np.eye(n, dtype=bool)
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
        slow = min(pairs, key=lambda p: (cluster.bandwidth_gbps[p], -cluster.latency_us[p], p))
        fast = min(pairs, key=lambda p: (-cluster.bandwidth_gbps[p], cluster.latency_us[p], p))
        out["slowest_route"] = _route_entry(cluster, *slow)
        out["fastest_route"] = _route_entry(cluster, *fast)
        out["min_bandwidth_gbps"] = float(cluster.bandwidth_gbps[off].min())
        out["max_bandwidth_gbps"] = float(cluster.bandwidth_gbps[off].max())
    return out

"""Hand-built GroupGraphs, Clusters and a fixed-time cost model for simulator tests."""

from __future__ import annotations

import numpy as np

from tag.graph.groups import Group, GroupEdge, GroupGraph
from tag.graph.opgraph import Op, OpGraph
from tag.topology.cluster import Cluster, Device, DeviceType, Link, Machine

GPU = DeviceType("TestGPU", peak_tflops=10.0, memory_gb=16.0, memory_bandwidth_gbps=8000.0)


def make_cluster(machines: list[int], intra_gbps: float = 80.0, nic_gbps: float = 8.0,
                 dev_lat_us: float = 1.0, nic_lat_us: float = 4.0, dtype: DeviceType = GPU) -> Cluster:
    """machines[i] devices in machine i. Device <-> machine node links (intra), machine <-> switch
    links (NIC). Intra route latency 2 x dev_lat_us, inter 2 x dev_lat_us + 2 x nic_lat_us."""
    devices, ms, links = [], [], []
    index: dict[tuple[str, str], int] = {}

    def link(a, b, gbps, lat):
        for s, d in ((a, b), (b, a)):
            index[(s, d)] = len(links)
            links.append(Link(s, d, gbps, lat))

    for mi, count in enumerate(machines):
        m = f"m{mi}"
        idx = []
        for j in range(count):
            dev = Device(f"{m}/{j}", len(devices), m, j, dtype)
            devices.append(dev)
            idx.append(dev.index)
            link(dev.id, m, intra_gbps, dev_lat_us)
        ms.append(Machine(m, tuple(idx), intra_gbps, nic_gbps))
        if len(machines) > 1:
            link(m, "sw", nic_gbps, nic_lat_us)
    n = len(devices)
    routes = [[() for _ in range(n)] for _ in range(n)]
    bw = np.full((n, n), np.inf)
    lat = np.zeros((n, n))
    for a in devices:
        for b in devices:
            if a.index == b.index:
                continue
            if a.machine == b.machine:
                path = [(a.id, a.machine), (b.machine, b.id)]
            else:
                path = [(a.id, a.machine), (a.machine, "sw"), ("sw", b.machine), (b.machine, b.id)]
            r = tuple(index[p] for p in path)
            routes[a.index][b.index] = r
            bw[a.index, b.index] = min(links[l].bandwidth_gbps for l in r)
            lat[a.index, b.index] = sum(links[l].latency_us for l in r)
    return Cluster("test", devices, ms, links, routes, bw, lat)


def make_gg(groups: list[dict], edges: list[tuple[int, int, float, float]]) -> GroupGraph:
    """groups: dicts of Group fields (besides id/op_ids); one op per group named 'op<g>'.
    edges: (src, dst, bytes_per_row, bytes_fixed)."""
    ops, gs = [], []
    for g, spec in enumerate(groups):
        ops.append(Op(f"op{g}", "MatMul", "", [], [], op_class="matmul"))
        gs.append(Group(id=g, op_ids=[g], splittable=True, **spec))
    graph = OpGraph("test.onnx", ops, {}, [], [], [], 1, 1)
    return GroupGraph(graph, gs, [GroupEdge(s, d, [f"t{s}_{d}"], bpr, bf) for s, d, bpr, bf in edges])


class FixedCost:
    """fwd = fwd_per_row[g] x rows, bwd = 2 x fwd, update = upd[g] (ms); independent of device type."""

    name = "fixed"

    def __init__(self, fwd_per_row: list[float], upd: list[float] | None = None):
        self.f = fwd_per_row
        self.u = upd or [0.0] * len(fwd_per_row)

    def group_fwd_ms(self, g, device, rows):
        return self.f[g] * rows

    def group_bwd_ms(self, g, device, rows):
        return 2 * self.f[g] * rows

    def update_ms(self, g, device):
        return self.u[g]

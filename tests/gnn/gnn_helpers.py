"""Helpers for the GNN tests: an analytic cost model and a scalable two-machine topology."""

from __future__ import annotations


class FlopsCost:
    """A cost model whose times are pure FLOPs / peak and bytes / memory bandwidth (no launch overheads),
    so a device twice as fast gives exactly half the time."""

    name = "flops"

    def __init__(self, gg):
        self.gg = gg

    def group_fwd_ms(self, gid, device, rows):
        g = self.gg.groups[gid]
        return (g.fwd_flops_per_row * rows + g.fwd_flops_fixed) / (device.peak_tflops * 1e9)

    def group_bwd_ms(self, gid, device, rows):
        g = self.gg.groups[gid]
        return (g.bwd_flops_per_row * rows + g.bwd_flops_fixed) / (device.peak_tflops * 1e9)

    def update_ms(self, gid, device):
        return self.gg.groups[gid].param_bytes * 4 / (device.memory_bandwidth_gbps * 1e9 / 8 / 1e3)


def topology(speed: float = 1.0, bw: float = 1.0, latency: float = 1.0) -> dict:
    """Two machines (2 fast + 1 slow device, 1 device) with every peak, memory bandwidth, link bandwidth
    multiplied and every latency divided as asked."""
    return {
        "version": 1, "name": "t",
        "device_types": {
            "fast": {"peak_tflops": 10.0 * speed, "memory_gb": 16, "memory_bandwidth_gbps": 6000 * speed},
            "slow": {"peak_tflops": 4.0 * speed, "memory_gb": 8, "memory_bandwidth_gbps": 2000 * speed},
        },
        "machines": [
            {"name": "a", "devices": [{"type": "fast", "count": 2}, {"type": "slow", "count": 1}],
             "intra_bandwidth_gbps": 200 * bw, "nic_bandwidth_gbps": 20 * bw,
             "intra_latency_us": 2 / latency, "nic_latency_us": 3 / latency},
            {"name": "b", "devices": [{"type": "slow", "count": 1}], "nic_bandwidth_gbps": 10 * bw,
             "intra_latency_us": 2 / latency, "nic_latency_us": 3 / latency},
        ],
        "links": [{"between": ["a", "b"], "bandwidth_gbps": 10 * bw, "latency_us": 10 / latency}],
    }


def dp_instance(graph, training, k: int):
    """(gg, cluster, cost, batch, base, space, feats): `graph` coarsened to k groups on `topology()` under
    `FlopsCost`, the dp-even baseline, its search space and the instance's features (the GNN tests' common setup)."""
    from tag.gnn.data import InstanceFeatures
    from tag.graph.coarsen import coarsen
    from tag.search.baselines import build_baseline
    from tag.search.space import build_space
    from tag.topology import parse_topology

    gg = coarsen(graph, k=k, n_devices=4)
    cluster = parse_topology(topology(), "t.json")
    cost = FlopsCost(gg)
    batch = gg.graph.batch_size
    base = build_baseline("dp-even", gg, cluster, cost, training, batch)
    space = build_space(gg, cluster, cost, batch, base)
    return gg, cluster, cost, batch, base, space, InstanceFeatures(gg, cluster, cost, batch, order=space.order)

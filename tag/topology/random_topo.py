"""Random heterogeneous clusters (topology.json v1 objects) for GNN training and tests.

A cluster is a function of its seed and arguments only. Three layouts are drawn: ``flat`` (every machine
on the implicit switch by its NIC), ``direct`` (flat plus a few direct machine-machine links that replace
those pairs' routes) and ``racks`` (machines linked to top-of-rack switches, racks joined by a spine over
uplinks that are often narrower than the machines' NICs: oversubscribed). Link speeds spread from 1 Gb/s
to 200 Gb/s between machines and from 32 Gb/s (a narrow PCIe slot) to 2400 Gb/s (NVLink) inside them.
"""

from __future__ import annotations

import random

from tag.topology.catalog import CATALOG

GPU_TYPES = tuple(sorted(name for name, t in CATALOG.items() if t.kind == "gpu"))
NIC_GBPS = (1.0, 5.0, 10.0, 10.4, 22.5, 25.0, 40.0, 50.0, 100.0, 200.0)
INTRA_GBPS = (32.0, 64.0, 128.0, 256.0, 1200.0, 2400.0)
UPLINK_GBPS = (1.0, 10.0, 25.0, 40.0, 100.0)
LAYOUTS = ("flat", "direct", "racks")


def random_topology(seed: int, min_machines: int = 1, max_machines: int = 6, max_devices_per_machine: int = 8,
                    device_types: tuple[str, ...] | None = None, layout: str | None = None) -> dict:
    """A random topology.json v1 object: mixed device types, 1..`max_devices_per_machine` devices per machine.

    `device_types` restricts the catalog names drawn (default: every GPU type); `layout` forces one of
    ``flat``, ``direct``, ``racks`` (default: drawn; ``racks`` needs at least 3 machines).
    """
    if not 1 <= min_machines <= max_machines:
        raise ValueError(f"need 1 <= min_machines <= max_machines, got {min_machines}, {max_machines}")
    if max_devices_per_machine < 1:
        raise ValueError("max_devices_per_machine must be at least 1")
    rng = random.Random(seed)
    types = tuple(device_types or GPU_TYPES)
    n_machines = rng.randint(min_machines, max_machines)
    machines = []
    for i in range(n_machines):
        count = rng.randint(1, max_devices_per_machine)
        main = rng.choice(types)
        devices = [{"type": main, "count": count}]
        if count >= 2 and rng.random() < 0.15:  # a machine with two device types
            other = rng.choice(types)
            split = rng.randint(1, count - 1)
            devices = [{"type": main, "count": split}, {"type": other, "count": count - split}]
        m = {"name": f"m{i}", "devices": devices, "intra_bandwidth_gbps": rng.choice(INTRA_GBPS)}
        if n_machines > 1:
            m["nic_bandwidth_gbps"] = rng.choice(NIC_GBPS)
        machines.append(m)
    topo: dict = {"version": 1, "name": f"random-{seed}", "machines": machines}
    if n_machines == 1:
        topo["x-layout"] = "single"
        return topo
    if layout is None:
        layout = rng.choice(LAYOUTS if n_machines >= 3 else LAYOUTS[:2])
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    links: list[dict] = []
    if layout == "direct":
        pairs = [(a, b) for a in range(n_machines) for b in range(a + 1, n_machines)]
        for a, b in rng.sample(pairs, rng.randint(1, min(3, len(pairs)))):
            links.append({"between": [f"m{a}", f"m{b}"], "bandwidth_gbps": rng.choice(NIC_GBPS),
                          "latency_us": float(rng.choice((2, 5, 8, 20)))})
    elif layout == "racks":
        n_racks = rng.randint(2, min(4, n_machines))
        racks = [i % n_racks for i in range(n_machines)]
        rng.shuffle(racks)
        switches = [{"name": f"tor{r}"} for r in range(n_racks)] + [{"name": "spine"}]
        for i, m in enumerate(machines):
            links.append({"between": [m["name"], f"tor{racks[i]}"], "bandwidth_gbps": m["nic_bandwidth_gbps"]})
        for r in range(n_racks):
            links.append({"between": [f"tor{r}", "spine"], "bandwidth_gbps": rng.choice(UPLINK_GBPS)})
        topo["switches"] = switches
    if links:
        topo["links"] = links
    topo["x-layout"] = layout
    return topo

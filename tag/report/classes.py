"""Aggregation: identical devices become one class, runs of identical groups one run, identical machines one unit.

Devices are identical when they have the same type, the same machine kind (device types and counts, intra and NIC
bandwidth), the same rows in every group, the same parameter-server roles, and the same simulated peak memory and
busy time (so every figure a class shows is exact for each member). Classes keep the order of their first member.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceClass:
    """Devices `members` (topology indices, ascending) that the report draws once.

    rows[g]: rows each member computes in group g; peak_gb / busy_ms: each member's simulated figures.
    """

    members: tuple[int, ...]
    type_name: str
    machine_kind: str
    rows: tuple[int, ...]
    peak_gb: float
    usable_gb: float
    busy_ms: float

    @property
    def first(self) -> int:
        return self.members[0]


def machine_kind(cluster, machine) -> str:
    """A machine's kind as text, e.g. '2 x V100-16GB, intra 128 Gb/s, NIC 100 Gb/s'."""
    counts: dict[str, int] = {}
    for i in machine.device_indices:
        name = cluster.devices[i].type.name
        counts[name] = counts.get(name, 0) + 1
    devs = " + ".join(f"{n} x {t}" for t, n in counts.items())
    nic = f", NIC {machine.nic_bandwidth_gbps:g} Gb/s" if machine.nic_bandwidth_gbps else ""
    return f"{devs}, intra {machine.intra_bandwidth_gbps:g} Gb/s{nic}"


def device_classes(cluster, strategy, result) -> list[DeviceClass]:
    """The classes of identical devices (module docstring), in order of first member."""
    kinds = {m.name: machine_kind(cluster, m) for m in cluster.machines}
    servers: dict[int, list[int]] = {}
    for g, dec in enumerate(strategy.decisions):
        if dec.sync == "ps" and dec.server is not None:
            servers.setdefault(dec.server, []).append(g)
    by_key: dict[tuple, list[int]] = {}
    for d in cluster.devices:
        rows = tuple(dec.rows[d.index] for dec in strategy.decisions)
        key = (d.type.name, kinds[d.machine], rows, tuple(servers.get(d.index, ())),
               float(result.peak_memory_gb.get(d.id, 0.0)), float(result.busy_ms.get(d.id, 0.0)))
        by_key.setdefault(key, []).append(d.index)
    out = []
    for (type_name, kind, rows, _, peak, busy), members in by_key.items():
        usable_gb = cluster.devices[members[0]].type.usable_memory_bytes / 1e9
        out.append(DeviceClass(tuple(members), type_name, kind, rows, peak, usable_gb, busy))
    return out


def group_runs(strategy) -> list[tuple[int, int]]:
    """(first, last) group ids of runs of consecutive groups with equal row maps, ZeRO stage, recomputation and
    pipeline stage (their syncs may differ)."""
    stage = strategy.pipeline.stage_of_group() if getattr(strategy, "pipeline", None) is not None else {}

    def key(g: int, dec) -> tuple:
        return dec.rows, dec.zero, dec.recompute, stage.get(g)

    runs: list[list[int]] = []
    for g, dec in enumerate(strategy.decisions):
        if runs and key(runs[-1][0], strategy.decisions[runs[-1][0]]) == key(g, dec):
            runs[-1][1] = g
        else:
            runs.append([g, g])
    return [(a, b) for a, b in runs]


def id_span(ids: list[str]) -> str:
    """Device ids as short text: 'm0/0', 'm0/0, m0/1', or 'm0/0 … m63/7'."""
    if len(ids) <= 2:
        return ", ".join(ids)
    return f"{ids[0]} … {ids[-1]}"

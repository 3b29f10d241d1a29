"""The Cluster: devices in topology order, machines, directed links and routes (plain data).

Every physical link is full duplex, so it appears here as two directed `Link`s; flows only share a
`Link` when they go the same direction. A route between two devices is the list of directed link
indices a byte crosses. Device ids are ``machine/index`` (``m0/0``), in topology order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class DeviceType:
    """A device model: peak FP32 throughput, memory, memory bandwidth (units in names)."""

    name: str
    peak_tflops: float
    memory_gb: float
    memory_bandwidth_gbps: float  # 10^9 bits per second, like every _gbps figure
    kind: str = "gpu"  # "gpu" or "cpu"
    extra: dict = field(default_factory=dict, compare=False, hash=False)  # e.g. tf32/amp peaks

    @property
    def usable_memory_bytes(self) -> float:
        """0.92 x memory_gb x 1e9 (allocator and framework reserve, DESIGN.md)."""
        return 0.92 * self.memory_gb * 1e9


@dataclass(frozen=True)
class Device:
    id: str  # "m0/0"
    index: int  # position in topology order
    machine: str
    local_index: int
    type: DeviceType


@dataclass(frozen=True)
class Machine:
    name: str
    device_indices: tuple[int, ...]
    intra_bandwidth_gbps: float
    nic_bandwidth_gbps: float | None


@dataclass(frozen=True)
class Link:
    """One direction of a physical link between two named nodes (devices, machines' NICs, switches)."""

    src: str
    dst: str
    bandwidth_gbps: float
    latency_us: float

    @property
    def bytes_per_ms(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8 / 1e3


@dataclass
class Cluster:
    """A parsed, validated topology.

    routes[i][j] is the tuple of directed link indices from device i to device j (empty for i == j).
    bandwidth_gbps[i, j] is the narrowest link on that route, latency_us[i, j] the sum of its latencies
    (the diagonal holds inf and 0: a device needs no transfer to itself). The network model and the
    latency accounting are documented in `tag/topology/routing.py`.
    """

    name: str
    devices: list[Device]
    machines: list[Machine]
    links: list[Link]
    routes: list[list[tuple[int, ...]]]
    bandwidth_gbps: np.ndarray
    latency_us: np.ndarray
    source: str = ""  # path the topology was read from, for messages and plan provenance

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @cached_property
    def type_ids(self) -> list[int]:
        """Each device's type as a small int, in topology order (equal types, equal ints; numbered by first
        appearance): a memo keyed by it hashes an int, where a `DeviceType` key hashes every field."""
        index: dict = {}
        return [index.setdefault(d.type, len(index)) for d in self.devices]

    def device_index(self, device_id: str) -> int:
        for d in self.devices:
            if d.id == device_id:
                return d.index
        raise KeyError(device_id)

    def machine_of(self, device_index: int) -> str:
        return self.devices[device_index].machine

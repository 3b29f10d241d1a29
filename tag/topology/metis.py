"""Import of a Metis-style cluster file (Um et al., ATC'24) into a topology.json v1 object.

Metis describes a cluster as one JSON object keyed by node (an IP address or host name)::

    {"10.0.0.1": {"instance_type": "A100", "inter_bandwidth": 312500000.0,
                  "intra_bandwidth": 5312500000.0, "memory": 80, "num_device": 4}}

Units assumed: Metis' own files store `inter_bandwidth` (the node's network bandwidth) and
`intra_bandwidth` (between devices inside the node) in **bytes per second** (312500000.0 = 2.5 Gb/s);
hand-written files often give Gb/s. A value above 1e6 is read as bytes/s and converted (x 8 / 1e9);
a value up to 1e6 is read as Gb/s. `memory` is the per-device memory in GB and picks the catalog
variant (A100 with 80 -> A100-80GB). `num_device` (Metis keeps it in its hostfile) defaults to 1.
An `instance_type` that is neither a catalog name nor a known family is an error.
"""

from __future__ import annotations

import os

from tag.errors import InputError, short_repr
from tag.topology.catalog import CATALOG

BYTES_PER_S_THRESHOLD = 1e6  # above: bytes/s; at or below: Gb/s

_NODE_KEYS = {"instance_type", "inter_bandwidth", "intra_bandwidth", "memory", "num_device"}


def looks_like_metis(obj) -> bool:
    """True when `obj` is a non-empty object of node objects that all carry `instance_type`."""
    return (isinstance(obj, dict) and bool(obj) and "version" not in obj and "machines" not in obj
            and all(isinstance(v, dict) and "instance_type" in v for v in obj.values()))


def bandwidth_to_gbps(value: float) -> float:
    """A Metis bandwidth figure in Gb/s: bytes/s above `BYTES_PER_S_THRESHOLD`, else already Gb/s."""
    return value * 8 / 1e9 if value > BYTES_PER_S_THRESHOLD else float(value)


def _catalog_type(instance_type: str, memory_gb: float | None) -> str | None:
    if instance_type in CATALOG:
        return instance_type
    key = instance_type.upper().replace(" ", "").replace("TESLA", "").replace("NVIDIA", "").replace("GEFORCE", "")
    key = key.replace("-", "")
    family = [name for name in CATALOG if name.upper().replace("-", "").startswith(key)]
    if not family:
        return None
    if memory_gb is not None:
        family.sort(key=lambda name: (abs(CATALOG[name].memory_gb - memory_gb), name))
    else:
        family.sort()
    return family[0]


def metis_to_topology(obj: dict, source: str) -> dict:
    """Convert a parsed Metis cluster object to a topology.json v1 object (one machine per node)."""
    if not looks_like_metis(obj):
        raise InputError(source, "$", "a Metis cluster object {node: {instance_type, inter_bandwidth, ...}}",
                         short_repr(obj))
    machines = []
    for node, info in obj.items():
        w = node
        for key in info:
            if key not in _NODE_KEYS and not str(key).startswith("x-"):
                raise InputError(source, f"{w}.{key}", f"one of the keys {sorted(_NODE_KEYS)}", "an unknown key")
        nums = {}
        for key in ("inter_bandwidth", "intra_bandwidth", "memory"):
            if key in info:
                v = info[key]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
                    raise InputError(source, f"{w}.{key}", "a positive number", short_repr(v))
                nums[key] = float(v)
        itype = info["instance_type"]
        tname = _catalog_type(itype, nums.get("memory")) if isinstance(itype, str) and itype else None
        if tname is None:
            raise InputError(source, f"{w}.instance_type", "a device type of the catalog (A100, V100, T4, ...)",
                             short_repr(itype))
        count = info.get("num_device", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise InputError(source, f"{w}.num_device", "a positive integer", short_repr(count))
        if "inter_bandwidth" not in nums and len(obj) > 1:
            raise InputError(source, f"{w}.inter_bandwidth", "the node's network bandwidth", "nothing")
        m = {"name": str(node).replace("/", "_"), "devices": [{"type": tname, "count": count}]}
        if "intra_bandwidth" in nums:
            m["intra_bandwidth_gbps"] = bandwidth_to_gbps(nums["intra_bandwidth"])
        if "inter_bandwidth" in nums:
            m["nic_bandwidth_gbps"] = bandwidth_to_gbps(nums["inter_bandwidth"])
        machines.append(m)
    name = os.path.splitext(os.path.basename(source))[0] or "metis"
    return {"version": 1, "name": name, "machines": machines, "x-imported-from": "metis"}


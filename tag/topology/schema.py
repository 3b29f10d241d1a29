"""Validation of topology.json version 1 into a `TopologySpec` (plain data, defaults filled in).

Every problem raises `InputError(file, json_path, expected, found)` with a path like
``machines[1].devices[0].count``. Unknown keys are errors unless they start with ``x-``.
Routing (the network graph, routes, matrices) lives in `tag/topology/routing.py`.
"""

from __future__ import annotations

import difflib

import math
import os
from dataclasses import dataclass, field, replace

from tag.errors import InputError, short_repr
from tag.topology.catalog import CATALOG
from tag.topology.cluster import DeviceType

# Defaults of DESIGN.md § topology.json, plus the latency split documented in routing.py.
DEFAULT_INTRA_BANDWIDTH_GBPS = 128.0  # one x16 PCIe slot (DESIGN.md default)
DEFAULT_INTRA_LATENCY_US = 2.0  # device -> machine fabric -> device, end to end
DEFAULT_NIC_LATENCY_US = 4.0  # machine NIC <-> a switch, one hop (so machine to machine via a switch = 8)
DEFAULT_MACHINE_LINK_LATENCY_US = 8.0  # a direct machine-machine link (device to device = 1 + 8 + 1 = 10)
DEFAULT_SWITCH_LINK_LATENCY_US = 4.0  # any link with a switch at one end, or between two switches
DEFAULT_DEVICE_LINK_LATENCY_US = 1.0  # a link with a device at one end (e.g. NVLink between two GPUs)

MAX_DEVICES = 1024  # a sanity bound on the devices of one topology (routes are quadratic in it)

IMPLICIT_SWITCH = "<switch>"  # the name of the implicit switch node; user names may not start with "<"

_TOP_KEYS = {"version", "name", "device_types", "machines", "links", "switches"}
_TYPE_KEYS = {"peak_tflops", "memory_gb", "memory_bandwidth_gbps", "kind", "extra"}
_MACHINE_KEYS = {"name", "devices", "intra_bandwidth_gbps", "nic_bandwidth_gbps", "intra_latency_us",
                 "nic_latency_us"}
_DEVICE_KEYS = {"type", "count"}
_SWITCH_KEYS = {"name"}
_LINK_KEYS = {"between", "bandwidth_gbps", "latency_us"}


@dataclass(frozen=True)
class MachineSpec:
    name: str
    devices: tuple[tuple[str, int], ...]  # (type name, count) in file order
    intra_bandwidth_gbps: float
    intra_latency_us: float
    nic_bandwidth_gbps: float | None
    nic_latency_us: float
    where: str  # JSON path, for messages


@dataclass(frozen=True)
class LinkSpec:
    a: str
    b: str
    bandwidth_gbps: float
    latency_us: float
    where: str


@dataclass
class TopologySpec:
    name: str
    device_types: dict[str, DeviceType]
    machines: list[MachineSpec]
    switches: list[str]
    links: list[LinkSpec]
    source: str = ""
    device_ids: list[str] = field(default_factory=list)  # topology order


class _Checker:
    """Small typed accessors that raise InputError naming `source` and the JSON path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, expected: str, found=None, raw: bool = False):
        raise InputError(self.source, where, expected, found if raw else (None if found is None else short_repr(found)))

    def obj(self, value, where: str, allowed: set[str], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.fail(where, "a JSON object", _type_name(value), raw=True)
        for key in value:
            if key not in allowed and not str(key).startswith("x-"):
                self.fail(_join(where, key), f"one of the keys {sorted(allowed)} (or an x- key)", "an unknown key", raw=True)
        for key in required:
            if key not in value:
                self.fail(_join(where, key), "this required key", "nothing", raw=True)
        return value

    def number(self, value, where: str, positive: bool = True) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, "a positive number" if positive else "a non-negative number", value)
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            self.fail(where, "a positive finite number" if positive else "a non-negative finite number", value)
        return float(value)

    def count(self, value, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            if isinstance(value, float) and value.is_integer() and value > 0:
                return int(value)
            self.fail(where, "a positive integer", value)
        return value

    def name(self, value, where: str, what: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"a non-empty string ({what})", value)
        if "/" in value or value.startswith("<"):
            self.fail(where, f"a {what} without '/' and not starting with '<'", value)
        return value

    def list(self, value, where: str, non_empty: bool = False) -> list:
        if not isinstance(value, list):
            self.fail(where, "a JSON array", _type_name(value), raw=True)
        if non_empty and not value:
            self.fail(where, "a non-empty array", "[]", raw=True)
        return value


def _join(where: str, key) -> str:
    return f"{where}.{key}" if where and where != "$" else str(key)


def _type_name(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _device_type(c: _Checker, name: str, entry, where: str) -> DeviceType:
    c.obj(entry, where, _TYPE_KEYS)
    base = CATALOG.get(name)
    if base is None:
        for key in ("peak_tflops", "memory_gb", "memory_bandwidth_gbps"):
            if key not in entry:
                c.fail(_join(where, key), f"this key (device type {name!r} is not in the built-in catalog)", "nothing", raw=True)
        base = DeviceType(name=name, peak_tflops=1.0, memory_gb=1.0, memory_bandwidth_gbps=1.0)
    fields = {}
    for key in ("peak_tflops", "memory_gb", "memory_bandwidth_gbps"):
        if key in entry:
            fields[key] = c.number(entry[key], _join(where, key))
    if "kind" in entry:
        if entry["kind"] not in ("gpu", "cpu"):
            c.fail(_join(where, "kind"), "'gpu' or 'cpu'", entry["kind"])
        fields["kind"] = entry["kind"]
    if "extra" in entry:
        if not isinstance(entry["extra"], dict):
            c.fail(_join(where, "extra"), "a JSON object", _type_name(entry["extra"]), raw=True)
        fields["extra"] = {**base.extra, **entry["extra"]}
    return replace(base, **fields)


def validate_topology(obj, source: str) -> TopologySpec:
    """Check a topology.json v1 object and fill in its defaults (DESIGN.md § topology.json).

    Returns a `TopologySpec`; raises `InputError(source, json_path, expected, found)` on the first problem.
    Does not check reachability (routing does).
    """
    c = _Checker(source)
    c.obj(obj, "$", _TOP_KEYS, required=("version", "machines"))
    if isinstance(obj["version"], bool) or obj["version"] != 1:
        c.fail("version", "1", obj["version"])
    name = obj.get("name", os.path.splitext(os.path.basename(source))[0] or "cluster")
    if not isinstance(name, str) or not name:
        c.fail("name", "a non-empty string", name)

    types = dict(CATALOG)
    dts = obj.get("device_types", {})
    c.obj(dts, "device_types", set(dts) if isinstance(dts, dict) else set())
    for tname, entry in dts.items():
        if not tname.strip():
            c.fail("device_types", "non-empty device type names", tname)
        types[tname] = _device_type(c, tname, entry, f"device_types.{tname}")

    machines: list[MachineSpec] = []
    node_where: dict[str, str] = {}
    device_ids: list[str] = []
    for mi, m in enumerate(c.list(obj["machines"], "machines", non_empty=True)):
        w = f"machines[{mi}]"
        c.obj(m, w, _MACHINE_KEYS, required=("name", "devices"))
        mname = c.name(m["name"], f"{w}.name", "machine name")
        if mname in node_where:
            c.fail(f"{w}.name", "a unique machine name", f"{mname!r}, already used at {node_where[mname]}", raw=True)
        node_where[mname] = f"{w}.name"
        devs = []
        local = 0
        for di, d in enumerate(c.list(m["devices"], f"{w}.devices", non_empty=True)):
            dw = f"{w}.devices[{di}]"
            c.obj(d, dw, _DEVICE_KEYS, required=("type", "count"))
            if not isinstance(d["type"], str) or d["type"] not in types:
                near = difflib.get_close_matches(str(d["type"]), sorted(types), n=3, cutoff=0.5)
                c.fail(f"{dw}.type", "a device type from the catalog or device_types ("
                       + (f"close: {', '.join(near)}; " if near else "")
                       + "`tag topo catalog` lists the catalog; describe another GPU under device_types, "
                       "docs/topology.md)", d["type"])
            n = c.count(d["count"], f"{dw}.count")
            if len(device_ids) + n > MAX_DEVICES:
                c.fail(f"{dw}.count", f"at most {MAX_DEVICES} devices in the whole topology", d["count"])
            devs.append((d["type"], n))
            device_ids += [f"{mname}/{local + k}" for k in range(n)]
            local += n
        nic = c.number(m["nic_bandwidth_gbps"], f"{w}.nic_bandwidth_gbps") if "nic_bandwidth_gbps" in m else None
        machines.append(MachineSpec(
            name=mname, devices=tuple(devs),
            intra_bandwidth_gbps=c.number(m.get("intra_bandwidth_gbps", DEFAULT_INTRA_BANDWIDTH_GBPS), f"{w}.intra_bandwidth_gbps"),
            intra_latency_us=c.number(m.get("intra_latency_us", DEFAULT_INTRA_LATENCY_US), f"{w}.intra_latency_us", positive=False),
            nic_bandwidth_gbps=nic,
            nic_latency_us=c.number(m.get("nic_latency_us", DEFAULT_NIC_LATENCY_US), f"{w}.nic_latency_us", positive=False),
            where=w))

    switches: list[str] = []
    for si, s in enumerate(c.list(obj.get("switches", []), "switches")):
        w = f"switches[{si}]"
        c.obj(s, w, _SWITCH_KEYS, required=("name",))
        sname = c.name(s["name"], f"{w}.name", "switch name")
        if sname in node_where:
            c.fail(f"{w}.name", "a name no machine or switch already has", f"{sname!r}, already used at {node_where[sname]}", raw=True)
        node_where[sname] = f"{w}.name"
        switches.append(sname)

    kinds = {m.name: "machine" for m in machines} | {s: "switch" for s in switches}
    device_set = set(device_ids)
    links: list[LinkSpec] = []
    seen_pairs: dict[frozenset, str] = {}
    for li, link in enumerate(c.list(obj.get("links", []), "links")):
        w = f"links[{li}]"
        c.obj(link, w, _LINK_KEYS, required=("between", "bandwidth_gbps"))
        ends = link["between"]
        if not isinstance(ends, list) or len(ends) != 2:
            c.fail(f"{w}.between", "an array of two node names", ends)
        for k, end in enumerate(ends):
            if not isinstance(end, str) or (end not in kinds and end not in device_set):
                c.fail(f"{w}.between[{k}]", "the name of a machine, a switch or a device id", end)
        a, b = ends
        if a == b:
            c.fail(f"{w}.between", "two different nodes", ends)
        ka, kb = kinds.get(a, "device"), kinds.get(b, "device")
        for dev, other in ((a, b), (b, a)):
            if dev in device_set and dev.rsplit("/", 1)[0] == other:
                c.fail(f"{w}.between", f"no link between device {dev} and its own machine (its port is implicit)", ends)
        pair = frozenset((a, b))
        if pair in seen_pairs:
            c.fail(f"{w}.between", "a pair of nodes not linked before", f"{ends!r}, already linked at {seen_pairs[pair]}", raw=True)
        seen_pairs[pair] = w
        if "device" in (ka, kb):
            default_lat = DEFAULT_DEVICE_LINK_LATENCY_US
        elif "switch" in (ka, kb):
            default_lat = DEFAULT_SWITCH_LINK_LATENCY_US
        else:
            default_lat = DEFAULT_MACHINE_LINK_LATENCY_US
        links.append(LinkSpec(a, b, c.number(link["bandwidth_gbps"], f"{w}.bandwidth_gbps"),
                              c.number(link.get("latency_us", default_lat), f"{w}.latency_us", positive=False), w))

    in_link = {n for link in links for n in (link.a, link.b)}
    if len(machines) > 1:
        for m in machines:
            if m.nic_bandwidth_gbps is None and m.name not in in_link:
                c.fail(f"{m.where}.nic_bandwidth_gbps", "a NIC bandwidth (several machines and this one is in no link)",
                       "nothing", raw=True)
    return TopologySpec(name=name, device_types=types, machines=machines, switches=switches, links=links,
                        source=source, device_ids=device_ids)

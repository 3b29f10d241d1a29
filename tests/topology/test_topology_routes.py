"""Values of parsed topologies, worked out by hand from DESIGN.md's network model."""

import os

import numpy as np
import pytest

from tag.errors import InputError
from tag.topology import CATALOG, load_topology, parse_topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPO_DIR = os.path.join(ROOT, "datasets", "topologies")


def _two(nic0=100, nic1=50, **extra):
    return {"version": 1, "machines": [
        {"name": "a", "devices": [{"type": "V100-16GB", "count": 2}], "nic_bandwidth_gbps": nic0},
        {"name": "b", "devices": [{"type": "T4-16GB", "count": 1}, {"type": "P100-12GB", "count": 1}],
         "nic_bandwidth_gbps": nic1, "intra_bandwidth_gbps": 64}], **extra}


def test_devices_in_topology_order_with_stable_ids():
    c = parse_topology(_two(), "x/two.json")
    assert [d.id for d in c.devices] == ["a/0", "a/1", "b/0", "b/1"]
    assert [d.index for d in c.devices] == [0, 1, 2, 3]
    assert [d.type.name for d in c.devices] == ["V100-16GB", "V100-16GB", "T4-16GB", "P100-12GB"]
    assert c.name == "two" and c.source == "x/two.json"
    assert c.machines[1].device_indices == (2, 3)
    assert c.machines[0].intra_bandwidth_gbps == 128.0  # default


def test_implicit_switch_pair_is_smaller_nic_and_10us():
    c = parse_topology(_two(), "two.json")
    # inside a: device ports at 128 -> 128, 2 us; inside b: 64, 2 us
    assert c.bandwidth_gbps[0, 1] == 128 and c.latency_us[0, 1] == 2
    assert c.bandwidth_gbps[2, 3] == 64 and c.latency_us[2, 3] == 2
    # a -> b: port 128, NIC 100, NIC 50, port 64 -> 50; 1 + 4 + 4 + 1 us
    assert c.bandwidth_gbps[0, 2] == 50 and c.latency_us[0, 2] == 10
    assert c.bandwidth_gbps[3, 1] == 50 and c.latency_us[3, 1] == 10
    assert len(c.routes[0][2]) == 4 and c.routes[0][0] == ()


def test_full_duplex_links_come_in_pairs_and_routes_are_reversed():
    c = parse_topology(_two(), "two.json")
    assert len(c.links) % 2 == 0
    for k in range(0, len(c.links), 2):
        f, b = c.links[k], c.links[k + 1]
        assert (f.src, f.dst) == (b.dst, b.src) and f.bandwidth_gbps == b.bandwidth_gbps
    for i in range(4):
        for j in range(4):
            fwd = c.routes[i][j]
            back = [li ^ 1 for li in reversed(c.routes[j][i])]
            assert list(fwd) == back
            # the route is a chain from device i to device j
            if fwd:
                assert c.links[fwd[0]].src == c.devices[i].id and c.links[fwd[-1]].dst == c.devices[j].id
                assert all(c.links[x].dst == c.links[y].src for x, y in zip(fwd, fwd[1:]))


def test_explicit_link_replaces_the_pair_route_only():
    obj = _two()
    obj["machines"].append({"name": "c", "devices": [{"type": "cpu", "count": 1}], "nic_bandwidth_gbps": 10})
    obj["links"] = [{"between": ["a", "b"], "bandwidth_gbps": 400}]
    c = parse_topology(obj, "three.json")
    # a-b now direct: min(128, 400, 64) = 64, latency 1 + 8 + 1
    assert c.bandwidth_gbps[0, 2] == 64 and c.latency_us[0, 2] == 10 and len(c.routes[0][2]) == 3
    # a-c still through the implicit switch: min(100, 10) = 10
    assert c.bandwidth_gbps[0, 4] == 10 and len(c.routes[0][4]) == 4
    obj["links"][0]["latency_us"] = 30
    c = parse_topology(obj, "three.json")
    assert c.latency_us[1, 3] == 32


def test_named_switches_make_multi_hop_racks():
    obj = {"version": 1, "switches": [{"name": "tor0"}, {"name": "tor1"}, {"name": "spine"}], "machines": [
        {"name": f"m{i}", "devices": [{"type": "A100-40GB", "count": 1}], "intra_bandwidth_gbps": 1000}
        for i in range(4)],
        "links": [{"between": ["m0", "tor0"], "bandwidth_gbps": 100}, {"between": ["m1", "tor0"], "bandwidth_gbps": 100},
                  {"between": ["m2", "tor1"], "bandwidth_gbps": 100}, {"between": ["m3", "tor1"], "bandwidth_gbps": 40},
                  {"between": ["tor0", "spine"], "bandwidth_gbps": 25, "latency_us": 3},
                  {"between": ["tor1", "spine"], "bandwidth_gbps": 50}]}
    c = parse_topology(obj, "racks.json")
    # same rack: dev, m0, tor0, m1, dev = 4 hops, 1 + 4 + 4 + 1
    assert c.bandwidth_gbps[0, 1] == 100 and c.latency_us[0, 1] == 10 and len(c.routes[0][1]) == 4
    # across racks: 6 hops, narrowest is the 25 Gb/s uplink; 1 + 4 + 3 + 4 + 4 + 1
    assert c.bandwidth_gbps[0, 2] == 25 and c.latency_us[0, 2] == 17 and len(c.routes[0][2]) == 6
    assert c.bandwidth_gbps[2, 3] == 40
    assert "<switch>" not in {l.src for l in c.links}  # no machine hangs off the implicit switch


def test_fewest_hops_beat_wider_longer_paths_then_widest_wins():
    obj = {"version": 1, "switches": [{"name": "s"}], "machines": [
        {"name": "a", "devices": [{"type": "cpu", "count": 1}], "intra_bandwidth_gbps": 1000},
        {"name": "b", "devices": [{"type": "cpu", "count": 1}], "intra_bandwidth_gbps": 1000}],
        "links": [{"between": ["a", "b"], "bandwidth_gbps": 1},
                  {"between": ["a", "s"], "bandwidth_gbps": 500}, {"between": ["s", "b"], "bandwidth_gbps": 500}]}
    c = parse_topology(obj, "hops.json")
    assert c.bandwidth_gbps[0, 1] == 1 and len(c.routes[0][1]) == 3
    # two equal-hop paths through two switches: the wider one is taken
    obj = {"version": 1, "switches": [{"name": "s1"}, {"name": "s2"}], "machines": obj["machines"],
           "links": [{"between": ["a", "s1"], "bandwidth_gbps": 10}, {"between": ["s1", "b"], "bandwidth_gbps": 300},
                     {"between": ["a", "s2"], "bandwidth_gbps": 70}, {"between": ["s2", "b"], "bandwidth_gbps": 60}]}
    c = parse_topology(obj, "wide.json")
    assert c.bandwidth_gbps[0, 1] == 60 and c.bandwidth_gbps[1, 0] == 60
    assert "s2" in {c.links[li].dst for li in c.routes[0][1]}


def test_device_link_is_a_one_hop_route():
    obj = {"version": 1, "machines": [{"name": "m", "devices": [{"type": "V100-16GB", "count": 3}]}],
           "links": [{"between": ["m/0", "m/1"], "bandwidth_gbps": 400}]}
    c = parse_topology(obj, "nv.json")
    assert c.bandwidth_gbps[0, 1] == 400 and c.latency_us[0, 1] == 1 and len(c.routes[0][1]) == 1
    assert c.bandwidth_gbps[0, 2] == 128 and c.latency_us[0, 2] == 2


def test_device_types_override_and_extend_the_catalog():
    obj = {"version": 1, "device_types": {"V100-16GB": {"peak_tflops": 14.0},
                                          "TPU-ish": {"peak_tflops": 100, "memory_gb": 32, "memory_bandwidth_gbps": 9000}},
           "machines": [{"name": "m", "devices": [{"type": "V100-16GB", "count": 1}, {"type": "TPU-ish", "count": 1}]}]}
    c = parse_topology(obj, "t.json")
    assert c.devices[0].type.peak_tflops == 14.0 and c.devices[0].type.memory_gb == 16
    assert c.devices[1].type.memory_bandwidth_gbps == 9000
    assert CATALOG["V100-16GB"].peak_tflops == 15.7  # the catalog itself is untouched


def test_catalog_units_and_required_entries():
    required = ["P100-12GB", "V100-16GB", "V100-32GB", "GTX1080Ti-11GB", "T4-16GB", "A10G-24GB", "L4-24GB",
                "A100-40GB", "A100-80GB", "H100-80GB", "RTX2080Ti-11GB", "A10-24GB", "cpu"]
    assert set(required) <= set(CATALOG)
    assert CATALOG["V100-16GB"].memory_bandwidth_gbps == 900 * 8  # bits, not bytes
    assert CATALOG["A100-40GB"].extra["tf32_tflops"] == 156 and CATALOG["A100-40GB"].peak_tflops == 19.5
    assert CATALOG["cpu"].kind == "cpu" and CATALOG["cpu"].peak_tflops == 0.05
    for t in CATALOG.values():
        assert t.peak_tflops > 0 and t.memory_gb > 0 and t.memory_bandwidth_gbps > 0


@pytest.mark.parametrize("name,machines,devices,tflops,inter_gbps", [
    ("heterog8", 4, 8, 2 * 15.7 + 4 * 11.34 + 2 * 9.3, 50),
    ("tag16", 7, 16, 4 * 15.7 + 8 * 11.34 + 4 * 9.3, 22.5),
    ("hap64", 8, 64, 16 * 15.7 + 48 * 9.3, 10.4),
    ("amp16", 4, 16, 16 * 8.1, 50),
    ("modern8", 2, 8, 4 * 19.5 + 4 * 30.3, 25),
])
def test_shipped_topologies(name, machines, devices, tflops, inter_gbps):
    c = load_topology(os.path.join(TOPO_DIR, f"{name}.json"))
    assert c.name == name and len(c.machines) == machines and c.n_devices == devices
    assert sum(d.type.peak_tflops for d in c.devices) == pytest.approx(tflops)
    first, last = 0, c.n_devices - 1
    assert c.devices[first].machine != c.devices[last].machine
    assert c.bandwidth_gbps[first, last] == pytest.approx(inter_gbps)
    off = ~np.eye(c.n_devices, dtype=bool)
    assert np.all(c.bandwidth_gbps[off] > 0) and np.all(c.latency_us[off] > 0)


def test_heterog8_fast_nic_pair_is_limited_by_the_slower_side():
    c = load_topology(os.path.join(TOPO_DIR, "heterog8.json"))
    assert c.bandwidth_gbps[c.device_index("m0/0"), c.device_index("m1/0")] == 50


def test_metis_file_is_imported(tmp_path):
    import json
    p = tmp_path / "metis.json"
    p.write_text(json.dumps({
        "10.0.0.1": {"instance_type": "A100", "inter_bandwidth": 312500000.0, "intra_bandwidth": 5312500000.0,
                     "memory": 80, "num_device": 2},
        "10.0.0.2": {"instance_type": "T4", "inter_bandwidth": 25, "intra_bandwidth": 128, "memory": 16}}))
    c = load_topology(str(p))
    assert [d.id for d in c.devices] == ["10.0.0.1/0", "10.0.0.1/1", "10.0.0.2/0"]
    assert c.devices[0].type.name == "A100-80GB" and c.devices[2].type.name == "T4-16GB"
    assert c.machines[0].nic_bandwidth_gbps == pytest.approx(2.5)  # 312.5e6 bytes/s
    assert c.machines[0].intra_bandwidth_gbps == pytest.approx(42.5)
    assert c.bandwidth_gbps[0, 2] == pytest.approx(2.5)
    p.write_text(json.dumps({"n1": {"instance_type": "Z9000", "inter_bandwidth": 10}}))
    with pytest.raises(InputError, match="n1.instance_type"):
        load_topology(str(p))

"""docs/topology.md: its examples load, its required keys are required, the Metis example imports as documented."""

import copy
import json
import os

import pytest

from tag.cli import main
from tag.topology import load_topology
from docs_fences import ROOT, json_fences, required_keys

PAGE = "topology.md"
METIS = os.path.join(ROOT, "datasets", "topologies", "metis", "metis_cluster.json")


def _example() -> dict:
    return next(obj for _, obj in json_fences(PAGE) if isinstance(obj, dict) and obj.get("version") == 1)


def _write(tmp_path, obj, name="t.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return str(path)


def test_every_json_block_is_accepted(tmp_path):
    blocks = json_fences(PAGE)
    assert len(blocks) >= 2  # the topology example and the Metis example
    for line, obj in blocks:
        cluster = load_topology(_write(tmp_path, obj, f"block{line}.json"))
        assert cluster.n_devices >= 1, line


def test_example_routes_as_the_page_works_them_out(tmp_path):
    c = load_topology(_write(tmp_path, _example()))
    ids = [d.id for d in c.devices]
    assert ids == ["m0/0", "m0/1", "m1/0", "m1/1", "m1/2", "m2/0", "m2/1", "m2/2", "m2/3"]
    i = ids.index
    # m0/0 -> m2/0: ports 2400 and 128, links 100, 200, 100, 40 -> narrowest 40; latency 1 + 4 + 4 + 4 + 4 + 1
    assert c.bandwidth_gbps[i("m0/0"), i("m2/0")] == 40.0
    assert c.latency_us[i("m0/0"), i("m2/0")] == 18.0
    # the NVLink bridge: one hop at 1200 Gb/s, 1 us (a link with a device at one end)
    assert (c.bandwidth_gbps[i("m2/0"), i("m2/1")], c.latency_us[i("m2/0"), i("m2/1")]) == (1200.0, 1.0)
    # inside m1 through the fabric at the default 128 Gb/s and 2 us
    assert (c.bandwidth_gbps[i("m1/0"), i("m1/2")], c.latency_us[i("m1/0"), i("m1/2")]) == (128.0, 2.0)
    types = {d.id: d.type for d in c.devices}
    assert types["m1/2"].peak_tflops == 6.5 and types["m1/2"].memory_gb == 16.0  # override keeps the T4's memory
    assert types["m1/0"].memory_bandwidth_gbps == 7488.0 and types["m1/0"].extra["amp_tflops"] == 71.0


def _drop(obj: dict, key: str) -> str:
    """Delete the documented key `key` from the example; return the JSON path the error must name."""
    paths = {"version": ("version",), "machines": ("machines",), "name": ("machines", 0, "name"),
             "devices": ("machines", 0, "devices"), "switches[i].name": ("switches", 0, "name"),
             "links[i].between": ("links", 0, "between"), "links[i].bandwidth_gbps": ("links", 0, "bandwidth_gbps")}
    assert key in paths, f"docs/{PAGE} marks {key!r} required; teach this test where it lives"
    *parent, last = paths[key]
    node = obj
    for p in parent:
        node = node[p]
    del node[last]
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in paths[key]).lstrip(".")


def test_documented_required_keys_are_required(tmp_path, capsys):
    keys = required_keys(PAGE)
    assert {"version", "machines", "name", "devices", "links[i].between"} <= set(keys), keys
    for key in keys:
        if key in ("instance_type",):  # the Metis table; checked in test_metis_example_*
            continue
        obj = copy.deepcopy(_example())
        where = _drop(obj, key)
        assert main(["inspect", _write(tmp_path, obj)]) == 2, key
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"t.json: {where}:" in err, (key, err)


@pytest.mark.parametrize("edit, where", [
    (lambda t: t["device_types"]["RTX3090-24GB"].pop("memory_gb"), "device_types.RTX3090-24GB.memory_gb"),
    (lambda t: t["machines"][1]["devices"][0].pop("count"), "machines[1].devices[0].count"),
    (lambda t: t["links"].pop(1), "machines[1].nic_bandwidth_gbps"),  # m1 in no link, no NIC
])
def test_conditionally_required_keys(tmp_path, capsys, edit, where):
    obj = copy.deepcopy(_example())
    edit(obj)
    assert main(["inspect", _write(tmp_path, obj)]) == 2
    assert f"t.json: {where}: expected" in capsys.readouterr().err


def test_metis_block_is_the_shipped_file():
    blocks = [obj for _, obj in json_fences(PAGE) if isinstance(obj, dict) and "version" not in obj]
    assert blocks == [json.load(open(METIS))]


def test_metis_example_imports_with_hand_worked_figures(tmp_path, capsys):
    out = tmp_path / "metis.json"
    assert main(["topo", "import", METIS, "-o", str(out)]) == 0
    assert "3 machines, 10 devices" in capsys.readouterr().out
    c = load_topology(str(out))
    ids = [d.id for d in c.devices]
    assert ids == [f"10.0.0.1/{k}" for k in range(4)] + [f"10.0.0.2/{k}" for k in range(4)] + ["10.0.0.3/0", "10.0.0.3/1"]
    assert [d.type.name for d in c.devices] == ["A100-80GB"] * 4 + ["V100-16GB"] * 4 + ["T4-16GB"] * 2
    i = ids.index
    # inter_bandwidth in bytes/s: 1.25e9 B/s = 10 Gb/s and 3.125e8 B/s = 2.5 Gb/s; a pair runs at the smaller NIC
    assert c.bandwidth_gbps[i("10.0.0.1/0"), i("10.0.0.2/0")] == pytest.approx(2.5)
    assert c.bandwidth_gbps[i("10.0.0.2/0"), i("10.0.0.3/1")] == pytest.approx(2.5)
    # intra_bandwidth: 3.75e10 B/s = 300 Gb/s; 5.3125e9 B/s = 42.5 Gb/s
    assert c.bandwidth_gbps[i("10.0.0.1/0"), i("10.0.0.1/3")] == pytest.approx(300.0)
    assert c.bandwidth_gbps[i("10.0.0.3/0"), i("10.0.0.3/1")] == pytest.approx(42.5)
    # FP32 peak: 4 x 19.5 (A100) + 4 x 15.7 (V100) + 2 x 8.1 (T4) = 157.0 TFLOPS
    assert sum(d.type.peak_tflops for d in c.devices) == pytest.approx(157.0)


def test_metis_file_reads_directly_as_a_topology():
    assert load_topology(METIS).n_devices == 10

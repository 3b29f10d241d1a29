"""`tag topo random`, `tag topo import` and `tag inspect TOPOLOGY.json` through tag.cli.main."""

import json
import os

from tag.cli import main
from tag.topology import load_topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_topo_random_is_a_function_of_the_seed(capsys):
    assert main(["topo", "random", "--seed", "7", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(["topo", "random", "--seed", "7", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert main(["topo", "random", "--seed", "8", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert a == b and a != c and a["version"] == 1


def test_topo_random_writes_a_loadable_file(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["topo", "random", "--seed", "3", "--machines", "5", "--layout", "racks", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    c = load_topology(str(out))
    assert len(c.machines) == 5
    topo = json.loads(out.read_text())
    assert {s["name"] for s in topo["switches"]} >= {"spine"}
    for m in topo["machines"]:
        assert 1 <= sum(d["count"] for d in m["devices"]) <= 8


def test_random_clusters_spread_types_and_speeds(capsys):
    types, nics = set(), set()
    for seed in range(30):
        assert main(["topo", "random", "--seed", str(seed), "--json"]) == 0
        topo = json.loads(capsys.readouterr().out)
        types |= {d["type"] for m in topo["machines"] for d in m["devices"]}
        nics |= {m.get("nic_bandwidth_gbps") for m in topo["machines"]} - {None}
    assert len(types) >= 6 and min(nics) <= 5 and max(nics) >= 100


def test_inspect_topology_json_keys(capsys):
    path = os.path.join(ROOT, "datasets", "topologies", "heterog8.json")
    assert main(["inspect", path, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["machines"] == 4 and s["devices"] == 8
    assert abs(s["total_peak_tflops"] - (2 * 15.7 + 4 * 11.34 + 2 * 9.3)) < 1e-9
    assert [d["id"] for d in s["device_list"]] == ["m0/0", "m0/1", "m1/0", "m1/1", "m2/0", "m2/1", "m3/0", "m3/1"]
    assert s["device_list"][2]["type"] == "GTX1080Ti-11GB"
    assert s["slowest_route"]["bandwidth_gbps"] == 50 and s["fastest_route"]["bandwidth_gbps"] == 128
    assert main(["inspect", path]) == 0
    human = capsys.readouterr().out
    assert "m3" in human and "P100-12GB" in human and "slowest" in human


def test_topo_import_metis(tmp_path, capsys):
    src = tmp_path / "cluster.json"
    src.write_text(json.dumps({"h1": {"instance_type": "V100", "inter_bandwidth": 1250000000.0, "memory": 32,
                                      "num_device": 4},
                               "h2": {"instance_type": "P100", "inter_bandwidth": 1250000000.0, "memory": 12}}))
    out = tmp_path / "t.json"
    assert main(["topo", "import", str(src), "-o", str(out)]) == 0
    capsys.readouterr()
    c = load_topology(str(out))
    assert [d.type.name for d in c.devices] == ["V100-32GB"] * 4 + ["P100-12GB"]
    assert c.bandwidth_gbps[0, 4] == 10.0  # 1.25e9 bytes/s


def test_topo_without_action_is_one_line_error(capsys):
    assert main(["topo"]) == 2
    assert capsys.readouterr().err.count("\n") == 1

"""`tag profile links`: the measured topology (from a synthetic sweep result, figures by hand; and from a real
2-rank gloo run) parses, has the right devices, and --compare flags where a hand-written topology disagrees."""

import contextlib
import io
import json

import pytest

from tag.cli import main
from tag.cost.comm import p2p_ms, ring_allreduce_ms
from tag.profile.links import compare, measured_topology
from tag.topology import load_topology
from tag.topology.loader import parse_topology

SIZES = [4, 65536, 1048576, 4194304]
BLOCK = {"host": "a", "cpu": "x", "memory_gb": 32.0, "peak_tflops": 0.08, "memory_bandwidth_gbps": 200.0,
         "matmul_gflops": 80.0, "copy_gbytes_per_s": 25.0, "threads": 1}


def _result():
    """Two hosts with two ranks each: intra 30 Gb/s / 100 us on a, 20 Gb/s / 60 us on b, a<->b 5 Gb/s / 300 us."""
    p2p = [{"kind": "intra", "ranks": [0, 1], "one_way_ms": [p2p_ms(s, 30.0, 100.0) for s in SIZES]},
           {"kind": "intra", "ranks": [2, 3], "one_way_ms": [p2p_ms(s, 20.0, 60.0) for s in SIZES]},
           {"kind": "inter", "ranks": [0, 2], "one_way_ms": [p2p_ms(s, 5.0, 300.0) for s in SIZES]}]
    return {"world": 4, "hosts": ["a", "a", "b", "b"], "machines": [[0, 1], [2, 3]],
            "machine_blocks": [BLOCK, dict(BLOCK, host="b")], "sizes_bytes": SIZES, "p2p": p2p,
            "allreduce_ms": [ring_allreduce_ms(s, 4, 5.0, 300.0) for s in SIZES], "backend": "gloo",
            "settings": {"device": "cpu", "device_type": "cpu"}}


def test_measured_topology_figures_by_hand():
    topo = measured_topology(_result(), "two")
    cl = parse_topology(json.loads(json.dumps(topo)), "two.json")
    assert cl.n_devices == 4 and [m.name for m in cl.machines] == ["m0", "m1"]
    t = cl.devices[0].type
    assert t.name == "cpu" and t.peak_tflops == pytest.approx(0.08) and t.memory_bandwidth_gbps == pytest.approx(200.0)
    assert t.memory_gb == pytest.approx(16.0)  # 32 GB shared by the machine's 2 ranks
    assert cl.bandwidth_gbps[0, 1] == pytest.approx(30.0, rel=1e-3) and cl.latency_us[0, 1] == pytest.approx(100.0, rel=1e-3)
    assert cl.bandwidth_gbps[2, 3] == pytest.approx(20.0, rel=1e-3) and cl.latency_us[2, 3] == pytest.approx(60.0, rel=1e-3)
    # device -> port (100/2) -> link -> port (60/2) -> device adds up to the measured 300 us end to end
    assert topo["links"][0]["latency_us"] == pytest.approx(300.0 - 50.0 - 30.0, rel=1e-3)
    assert cl.latency_us[0, 2] == pytest.approx(300.0, rel=1e-3) and cl.bandwidth_gbps[1, 3] == pytest.approx(5.0, rel=1e-3)
    ar = topo["x-measured"]["fits"]["allreduce"]
    assert ar["hop_bandwidth_gbps"] == pytest.approx(5.0, rel=1e-6) and ar["hop_latency_us"] == pytest.approx(300.0, rel=1e-6)


def test_compare_flags_disagreements(tmp_path):
    hand = {"version": 1, "device_types": {"cpu": {"peak_tflops": 0.06}},
            "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 2}], "intra_bandwidth_gbps": 32.0,
                          "intra_latency_us": 100.0, "nic_bandwidth_gbps": 5.0},
                         {"name": "m1", "devices": [{"type": "cpu", "count": 2}], "intra_bandwidth_gbps": 100.0,
                          "nic_bandwidth_gbps": 5.0}]}
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(hand))
    rows = {r["what"]: r for r in compare(measured_topology(_result()), str(path))}
    assert not rows["m0/0<->m0/1 bandwidth_gbps"]["disagrees"]  # 32 vs 30
    assert not rows["m0/0<->m0/1 latency_us"]["disagrees"]
    assert rows["m1/0<->m1/1 bandwidth_gbps"]["disagrees"] and rows["m1/0<->m1/1 bandwidth_gbps"]["ratio"] == pytest.approx(5.0, rel=1e-3)
    assert rows["m1/0<->m1/1 latency_us"]["hand"] == 2.0 and rows["m1/0<->m1/1 latency_us"]["disagrees"]
    assert not rows["cpu peak_tflops"]["disagrees"]  # 0.06 vs 0.08: within 1.5x
    assert rows["cpu memory_bandwidth_gbps"]["ratio"] == pytest.approx(100.0 / 200.0)  # catalog cpu: 100 Gb/s
    assert rows["cpu memory_bandwidth_gbps"]["disagrees"]
    # inter: hand = 50 + 4 + 4 + 1 = 59 us (ports, NICs) vs 300 measured
    assert rows["m0/0<->m1/0 latency_us"]["hand"] == pytest.approx(59.0) and rows["m0/0<->m1/0 latency_us"]["disagrees"]
    assert "devices" not in rows


def test_cli_measures_two_local_ranks(tmp_path):
    hand = tmp_path / "hand.json"
    hand.write_text(json.dumps({"version": 1, "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 3}]}]}))
    out = tmp_path / "measured.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["profile", "links", "--nproc", "2", "-o", str(out), "--sizes", "4,64K,256K", "--warmup", "1",
                     "--repeats", "2", "--quick", "--compare", str(hand), "--json"])
    assert code == 0
    summary = json.loads(buf.getvalue())
    cl = load_topology(str(out))
    assert cl.n_devices == 2 and len(cl.machines) == 1 and cl.name == "measured"
    assert summary["devices"] == 2 and summary["backend"] == "gloo" and len(summary["p2p"]) == 1
    pair = summary["p2p"][0]
    assert cl.bandwidth_gbps[0, 1] == pytest.approx(pair["bandwidth_gbps"], rel=1e-3) and pair["bandwidth_gbps"] > 0
    assert cl.latency_us[0, 1] == pytest.approx(pair["latency_us"], rel=1e-3)
    assert cl.devices[0].type.peak_tflops == pytest.approx(summary["measured_device_type"]["peak_tflops"])
    assert any(r["what"] == "devices" and r["disagrees"] for r in summary["compare"])  # 3 hand vs 2 measured


@pytest.mark.parametrize("argv", [["--sizes", "3,8"], ["--sizes", "4"], ["--sizes", "x"], ["--nproc", "0"],
                                  ["--compare", "/nonexistent/t.json"]])
def test_bad_links_flags_exit_2_before_measuring(tmp_path, capsys, argv):
    code = main(["profile", "links", "-o", str(tmp_path / "t.json"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("tag profile: error:"), err
    assert not (tmp_path / "t.json").exists()


def test_the_barrier_is_the_fastest_repeat_of_the_smallest_all_reduce():
    """The sweep's fastest repeats (a throttled hot loop inflates the median, not the fastest call) go into
    x-measured and are the barrier; a file written before them keeps the median's figure."""
    from tag.profile.links import barrier_ms

    res = _result()
    res["allreduce_ms"] = [3.3, 3.9, 5.0, 9.0]
    res["allreduce_fastest_ms"] = [0.21, 0.3, 2.0, 8.0]
    topo = json.loads(json.dumps(measured_topology(res)))
    assert topo["x-measured"]["allreduce_fastest_ms"] == [0.21, 0.3, 2.0, 8.0]
    assert barrier_ms(topo) == pytest.approx(0.21)
    del res["allreduce_fastest_ms"]
    old = json.loads(json.dumps(measured_topology(res)))
    assert "allreduce_fastest_ms" not in old["x-measured"] and barrier_ms(old) == pytest.approx(3.3)

"""Profile sets (tag.profile.profile_set, tag.cost.profile_db.load_all): one profile per device type in one file.

One Gemm (x[n, 4] -> W 4x4, b 4) as one group; profile A (device type cpu-a) times it 1 ms forward / 2 ms backward
per 10 rows, profile B (cpu-b) 3 / 6 ms: three times slower. `make_cost_model` on the set gives each device its
type's figures (B's 3x A's at every row count), and the same as each single profile's own model; a repeated
device type, or a set given where one profile is read, is a one-line input error naming the JSON path.
"""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tag.cost import make_cost_model
from tag.cost.profile_db import load, op_signature
from tag.errors import InputError
from tag.graph import load_model
from tag.profile.profile_set import write_profile_set
from tag.strategy import TrainingConfig
from tag.strategy.regroup import groupgraph_from_plan
from tag.topology.loader import parse_topology


def _setup(tmp_path):
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], name="gemm", transB=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        initializer=[numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
                     numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
    path = tmp_path / "gemm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    g = load_model(str(path), batch_size=10)
    sig = op_signature(g.ops[0], g)
    files = []
    for dtype, k in (("cpu-a", 1.0), ("cpu-b", 3.0)):
        p = tmp_path / f"{dtype}.json"
        p.write_text(json.dumps({"version": 1, "device_type": dtype, "ops": {
            sig: {"rows": [1, 10], "fwd_ms": [0.1 * k, 1.0 * k], "bwd_ms": [0.2 * k, 2.0 * k]}}}))
        files.append(str(p))
    cluster = parse_topology({"version": 1, "device_types": {t: {"peak_tflops": 1.0, "memory_gb": 8, "memory_bandwidth_gbps": 100}
                                                             for t in ("cpu-a", "cpu-b")},
                              "machines": [{"name": "m0", "devices": [{"type": "cpu-a", "count": 1}],
                                            "nic_bandwidth_gbps": 1},
                                           {"name": "m1", "devices": [{"type": "cpu-b", "count": 1}],
                                            "nic_bandwidth_gbps": 1}]}, "two")
    gg = groupgraph_from_plan(g, [["gemm"]])
    return gg, cluster, files


def test_a_profile_set_gives_each_device_type_its_own_figures(tmp_path):
    gg, cluster, (a, b) = _setup(tmp_path)
    both = str(tmp_path / "set.json")
    assert write_profile_set([a, b], both) == ["cpu-a", "cpu-b"]
    tc = TrainingConfig("sgd")
    cost = make_cost_model(gg, tc, profile=both)
    dev_a, dev_b = cluster.devices[0].type, cluster.devices[1].type
    assert (dev_a.name, dev_b.name) == ("cpu-a", "cpu-b")
    for rows in (1, 5, 10):
        fa, fb = cost.group_fwd_ms(0, dev_a, rows), cost.group_fwd_ms(0, dev_b, rows)
        assert fb == pytest.approx(3 * fa) and fa > 0
        assert fa == pytest.approx(make_cost_model(gg, tc, profile=a).group_fwd_ms(0, dev_a, rows))
        assert cost.group_bwd_ms(0, dev_b, rows) == pytest.approx(
            make_cost_model(gg, tc, profile=b).group_bwd_ms(0, dev_b, rows))
    assert cost.group_fwd_ms(0, dev_a, 10) == pytest.approx(1.0)  # the profile's own figure at a measured row count


def test_profile_set_errors_name_the_json_path(tmp_path):
    _, _, (a, b) = _setup(tmp_path)
    both = str(tmp_path / "set.json")
    with pytest.raises(InputError, match="device_type"):
        write_profile_set([a, a], both)
    write_profile_set([a, b], both)
    with pytest.raises(InputError, match=r"profiles: expected one device type's profile"):
        load(both)
    obj = json.loads(open(both).read())
    obj["profiles"][1]["threads"] = 0
    open(both, "w").write(json.dumps(obj))
    with pytest.raises(InputError, match=r"set.json: profiles\[1\].threads: expected a positive integer"):
        make_cost_model(None, TrainingConfig("sgd"), profile=both)


def test_links_topology_names_each_machines_device_type():
    """`tag profile links` with a --device-type per machine (ranks started by torchrun on each machine): each
    machine's devices get its type, each type the figures its machine measured (here peak 0.08 vs 0.02 TFLOPS)."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from test_profile_links import _result

    res = _result()
    res["machine_blocks"] = [dict(res["machine_blocks"][0], device_type="cpu-m0"),
                             dict(res["machine_blocks"][1], peak_tflops=0.02, device_type="cpu-m1")]
    from tag.profile.links import measured_topology

    topo = measured_topology(res, "two")
    cl = parse_topology(json.loads(json.dumps(topo)), "two.json")
    assert [d.type.name for d in cl.devices] == ["cpu-m0", "cpu-m0", "cpu-m1", "cpu-m1"]
    assert [cl.devices[i].type.peak_tflops for i in (0, 2)] == [pytest.approx(0.08), pytest.approx(0.02)]

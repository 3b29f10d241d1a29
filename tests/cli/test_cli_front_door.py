"""Compact row maps on many devices, --input-shape names the input the user wrote, and `tag plan` exits 3 with
one stderr line (still writing the least-overflowing plan) when no strategy fits in memory."""

import json
import os

import onnx
from onnx import TensorProto, helper

from tag.cli import main
from tag.cli._plan_report import describe_decision, row_runs_text
from tag.strategy import Decision
from tag.topology import parse_topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MLP = os.path.join(ROOT, "datasets/models/mlp.onnx")


def _gpus(machines: int, per_machine: int) -> dict:
    return {"version": 1, "name": f"g{machines * per_machine}",
            "machines": [{"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": per_machine}],
                          "nic_bandwidth_gbps": 100} for i in range(machines)]}


def test_row_runs_by_hand():
    assert row_runs_text([96, 96, 32, 32, 32, 32, 32, 32]) == "96 x 2, 32 x 6"
    assert row_runs_text([8, 16] * 256) == "16 x 256, 8 x 256 (interleaved)"  # 512 runs: grouped by value
    assert row_runs_text(list(range(1, 11))) == "1-10 each (55 in all)"


def test_describe_decision_on_8_and_512_devices():
    c8 = parse_topology(_gpus(1, 8), "g8.json")
    mixed = Decision(rows=(96, 96, 32, 32, 32, 32, 32, 32), sync="hierarchical")
    assert describe_decision(mixed, c8) == "rows 96 x 2, 32 x 6 on all 8 devices, hierarchical"
    part = Decision(rows=(0, 0, 0, 0, 16, 16, 16, 16), sync="ps", server=4)
    assert describe_decision(part, c8) == "16 rows x 4 devices (m0/4, m0/5, m0/6, m0/7), ps on m0/4"
    c512 = parse_topology(_gpus(64, 8), "g512.json")
    assert describe_decision(Decision(rows=(64,) * 512, sync="allreduce"), c512) == "64 rows x 512 devices, ring"


def test_plan_and_simulate_on_512_devices_print_compactly(tmp_path, capsys):
    topo = tmp_path / "g512.json"
    topo.write_text(json.dumps(_gpus(64, 8)))
    # 32768 rows over 512 identical devices, evenly: 64 each
    assert main(["plan", MLP, str(topo), "--baseline", "dp-even", "--batch-size", "32768"]) == 0
    out = capsys.readouterr().out
    decisions = out.split("decisions:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert decisions and all("64 rows x 512 devices" in line and len(line) < 100 for line in decisions)
    assert max(len(line) for line in out.splitlines()) < 150
    assert main(["simulate", MLP, str(topo), "--baseline", "dp-even", "--batch-size", "32768"]) == 0
    out = capsys.readouterr().out
    table_rows = [l for l in out.splitlines() if l.startswith("m0/")]
    assert len(table_rows) == 1 and "m0/0 … m63/7 (512)" in table_rows[0] and " 64 " in table_rows[0]
    assert len(out.splitlines()) < 10


def _symbolic_model(path):
    """x[N, S] -> Relu -> y: S is symbolic, so x needs --input-shape."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S"])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_input_shape_for_a_missing_input_names_it(tmp_path, capsys):
    model = tmp_path / "sym.onnx"
    _symbolic_model(model)
    assert main(["inspect", str(model), "--input-shape", "y=1x4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'y'" in err[0] and "data input of the model: x" in err[0] and "input 'x'" not in err[0]
    assert main(["inspect", str(model), "--input-shape", "x=1x4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["input_shapes"] == {"x": [1, 4]}


TINY_MEMORY = {"version": 1, "name": "tiny", "device_types": {"cpu": {"memory_gb": 0.001}},
               "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 4}]}]}


def test_plan_exits_3_when_nothing_fits_and_writes_the_least_overflowing_plan(tmp_path, capsys):
    topo = tmp_path / "tiny.json"
    topo.write_text(json.dumps(TINY_MEMORY))
    out = tmp_path / "p.json"
    assert main(["plan", MLP, str(topo), "--no-gnn", "--playouts", "10", "-o", str(out)]) == 3
    stdout, err = capsys.readouterr()
    lines = [l for l in err.splitlines() if not l.startswith("tag plan: batch")]
    assert stdout == "" and len(lines) == 1 and "no strategy fits in memory" in lines[0] and str(out) in lines[0]
    plan = json.loads(out.read_text())
    assert plan["predicted"]["oom"] is True and all(b["oom"] for b in plan["baselines"].values())
    worst = max(plan["predicted"]["peak_memory_gb"].values())
    for name in plan["baselines"]:  # a second method: simulate every baseline and compare its worst device
        assert main(["simulate", MLP, str(topo), "--baseline", name, "--batch-size", str(plan["model"]["batch_size"]),
                     "--json"]) == 0
        sim = json.loads(capsys.readouterr().out)
        assert sim["oom"] and worst <= max(sim["peak_memory_gb"].values()) + 1e-4, name
    assert main(["plan", MLP, str(topo), "--baseline", "dp-even", "--json"]) == 3
    stdout, err = capsys.readouterr()
    assert json.loads(stdout)["predicted"]["oom"] is True and "baseline dp-even does not fit in memory" in err

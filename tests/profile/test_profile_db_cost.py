"""Profile format round trip (with the measured-profile fields), interpolation in rows, and the simulated
time of a hand-built case under a profiled cost model (it moves by exactly the profiled amounts)."""

import json

import pytest

from tag.cost import RooflineCostModel, make_cost_model
from tag.cost.profile_db import GroupProfile, OpProfile, ProfileDB, interpolate, load, op_signature, save, to_json
from tag.errors import InputError
from tag.graph.groups import Group, GroupEdge, GroupGraph
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.topology.loader import parse_topology

TC = TrainingConfig(optimizer="sgd")


def _gg():
    """x -> MatMul(w) -> y -> Relu -> z; the MatMul in group 0, the Relu in group 1."""
    t = {"x": TensorInfo("x", "float32", (1, 64), batch_axis=0, role="data"),
         "w": TensorInfo("w", "float32", (64, 64), role="param"),
         "y": TensorInfo("y", "float32", (1, 64), batch_axis=0, producer=0, consumers=[1]),
         "z": TensorInfo("z", "float32", (1, 64), batch_axis=0, producer=1)}
    ops = [Op("mm", "MatMul", "", ["x", "w"], ["y"], op_class="matmul", fwd_flops_per_row=8192, bwd_flops_per_row=16384,
              mem_bytes_per_row=512, mem_bytes_fixed=16384, params=["w"], param_count=4096, param_bytes=16384),
           Op("relu", "Relu", "", ["y"], ["z"], op_class="elementwise", mem_bytes_per_row=512)]
    graph = OpGraph("m.onnx", ops, t, ["x"], ["w"], ["z"], 1, 4)
    groups = [Group(0, [0], True, param_count=4096, param_bytes=16384, params=["w"]), Group(1, [1], True)]
    return GroupGraph(graph, groups, [GroupEdge(0, 1, ["y"], 256.0, 0.0)])


def _one_cpu():
    return parse_topology({"version": 1, "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 1}]}]}, "one.json")


def test_round_trip_keeps_groups_dispatch_settings(tmp_path):
    db = ProfileDB("cpu", 1, {"host": "h", "peak_tflops": 0.07}, {"Relu|Nx8|00000000": OpProfile([1, 2], [0.1, 0.2], [0.3, 0.4])},
                   groups=[GroupProfile(["a", "b"], [1, 2], [0.5, 0.6], [0.7, 0.8], [0.4, 0.5], [0.6, 0.9])],
                   dispatch_ms=0.0021, settings={"warmup": 2, "repeats": 5})
    path = tmp_path / "p.json"
    save(db, str(path))
    back = load(str(path))
    assert back.groups == db.groups and back.dispatch_ms == 0.0021 and back.settings == {"warmup": 2, "repeats": 5}
    assert back.ops == db.ops and back.machine == db.machine and back.threads == 1
    save(back, str(tmp_path / "q.json"))
    assert (tmp_path / "q.json").read_text() == path.read_text()


def test_files_without_new_fields_still_load(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"version": 1, "device_type": "cpu", "ops": {"s": {"rows": [1], "fwd_ms": [1.0]}}}))
    db = load(str(path))
    assert db.groups == [] and db.dispatch_ms is None and db.settings == {}
    assert set(to_json(db)) == {"version", "device_type", "threads", "machine", "ops"}


@pytest.mark.parametrize("extra,where", [
    ({"groups": {}}, "groups"),
    ({"groups": [{"ops": [], "rows": [1], "fwd_ms": [1], "bwd_ms": [1]}]}, "groups[0].ops"),
    ({"groups": [{"ops": ["a"], "rows": [1, 2], "fwd_ms": [1], "bwd_ms": [1, 2]}]}, "groups[0].fwd_ms"),
    ({"groups": [{"ops": ["a"], "rows": [1], "fwd_ms": [1]}]}, "groups[0].bwd_ms"),
    ({"dispatch_ms": -1}, "dispatch_ms"),
])
def test_bad_measured_fields_name_the_place(tmp_path, extra, where):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"version": 1, "device_type": "cpu", "ops": {}, **extra}))
    with pytest.raises(InputError) as e:
        load(str(path))
    assert e.value.where == where


def test_interpolation_in_rows_by_hand():
    rows, ms = [1, 2, 4, 8], [0.5, 0.7, 1.1, 1.9]  # 0.3 + 0.2 r, measured at 4 points
    for r in (3, 5, 6, 7):
        assert interpolate(rows, ms, r) == pytest.approx(0.3 + 0.2 * r)
    assert interpolate(rows, ms, 16) == pytest.approx(0.3 + 0.2 * 16)  # beyond: last two points' line
    assert interpolate([2, 4], [1.0, 1.0], 100) == pytest.approx(1.0)  # a flat op stays flat


def test_profiled_simulation_moves_by_exactly_the_profiled_amounts(tmp_path):
    gg, cl = _gg(), _one_cpu()
    cpu = cl.devices[0].type
    roof = RooflineCostModel(gg, TC)
    st = Strategy((Decision((4,)), Decision((4,))))
    base = simulate(gg, cl, roof, st, TC).iteration_ms
    # hand-picked measurements for the MatMul only: at 4 rows fwd = (1 + 3) / 2 = 2.0, bwd = (2 + 4) / 2 = 3.0
    sig = op_signature(gg.graph.ops[0], gg.graph)
    assert sig.startswith("MatMul|Nx64,64x64|")
    path = tmp_path / "cpu.json"
    save(ProfileDB("cpu", 1, {}, {sig: OpProfile([2, 6], [1.0, 3.0], [2.0, 4.0])}), str(path))
    prof = make_cost_model(gg, TC, str(path))
    got = simulate(gg, cl, prof, st, TC).iteration_ms
    mm_roof = float(roof.op_ms(0, cpu, 4, "fwd")[0] + roof.op_ms(0, cpu, 4, "bwd")[0])
    assert got - base == pytest.approx((2.0 + 3.0) - mm_roof, abs=1e-9)
    # a profile for another device type changes nothing
    save(ProfileDB("T4-16GB", 1, {}, {sig: OpProfile([2, 6], [1.0, 3.0], [2.0, 4.0])}), str(tmp_path / "t4.json"))
    other = make_cost_model(gg, TC, str(tmp_path / "t4.json"))
    assert simulate(gg, cl, other, st, TC).iteration_ms == pytest.approx(base, abs=1e-12)
    # the MatMul on 2 rows on each of two devices: the profile gives fwd 1.0 and bwd 2.0 per replica
    two = parse_topology({"version": 1, "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 2}]}]}, "two.json")
    assert prof.group_fwd_ms(0, two.devices[1].type, 2) == pytest.approx(1.0)
    assert prof.group_bwd_ms(0, two.devices[1].type, 2) == pytest.approx(2.0)

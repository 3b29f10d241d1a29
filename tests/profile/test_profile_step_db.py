"""The profile's `step` block: JSON round trip, validation, and the cost model's step formulas worked out by hand."""

import pytest

from tag.cost.profile_db import OpProfile, ProfileDB, StepGroup, StepProfile, from_json, load, op_signature, save, to_json
from tag.cost.profiled import ProfileCostModel
from tag.errors import InputError
from tag.graph.groups import Group, GroupGraph
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.strategy import TrainingConfig
from tag.topology.cluster import DeviceType

CPU = DeviceType("cpu", 0.1, 16.0, 200.0, kind="cpu")


def _gg():
    """x -> mm (w: 16x16) -> relu -> mm2 (v: 16x8); the plan groups them as {mm, relu} and {mm2}."""
    t = {"x": TensorInfo("x", "float32", (1, 16), batch_axis=0), "w": TensorInfo("w", "float32", (16, 16), role="param"),
         "y": TensorInfo("y", "float32", (1, 16), batch_axis=0), "z": TensorInfo("z", "float32", (1, 16), batch_axis=0),
         "v": TensorInfo("v", "float32", (16, 8), role="param"), "o": TensorInfo("o", "float32", (1, 8), batch_axis=0)}
    ops = [Op("mm", "MatMul", "", ["x", "w"], ["y"], op_class="matmul", params=["w"]),
           Op("relu", "Relu", "", ["y"], ["z"], op_class="elementwise"),
           Op("mm2", "MatMul", "", ["z", "v"], ["o"], op_class="matmul", params=["v"])]
    graph = OpGraph("m.onnx", ops, t, ["x"], ["w", "v"], ["o"], 1, 8)
    groups = [Group(0, [0, 1], True, param_count=256, param_bytes=1024, params=["w"]),
              Group(1, [2], True, param_count=128, param_bytes=512, params=["v"])]
    return GroupGraph(graph, groups, [])


def _db(gg):
    g = gg.graph
    ops = {op_signature(g.ops[0], g): OpProfile([2, 4], [1.0, 2.0], [2.0, 4.0]),
           op_signature(g.ops[1], g): OpProfile([2, 4], [1.0, 1.0], [1.0, 2.0]),
           op_signature(g.ops[2], g): OpProfile([2, 4], [0.5, 1.0], [1.0, 2.0])}
    # the profile's own grouping: {mm} and {relu, mm2}
    step = StepProfile("adam", [2, 4], [StepGroup(["mm"], [2.0, 3.0], [4.0, 8.0], 0.3, 1024),
                                        StepGroup(["relu", "mm2"], [3.0, 6.0], [4.0, 8.0], 0.1, 512)],
                       update_ms=[0.8, 0.8], other_ms=[0.0, 1.6], copy_bytes=[1000, 3000], copy_in_ms=[0.1, 0.3],
                       copy_out_ms=[0.2, 0.4])
    return ProfileDB("cpu", 1, {}, ops, step=step)


def test_round_trip_and_bad_step_is_an_input_error(tmp_path):
    gg = _gg()
    db = _db(gg)
    save(db, str(tmp_path / "p.json"))
    back = load(str(tmp_path / "p.json"))
    assert back.step == db.step
    obj = to_json(db)
    obj["step"]["groups"][1]["fwd_ms"] = [1.0]
    with pytest.raises(InputError) as e:
        from_json(obj, "p.json")
    assert "step.groups[1].fwd_ms" in str(e.value)
    obj = to_json(db)
    obj["step"]["copy_bytes"] = [3000, 1000]
    with pytest.raises(InputError):
        from_json(obj, "p.json")


def test_step_formulas_by_hand():
    gg = _gg()
    cm = ProfileCostModel(gg, TrainingConfig(optimizer="adam"), _db(gg))
    # forward at 4 rows: step group {mm} = 3.0 -> mm 3.0; {relu, mm2} = 6.0 shared 1.0 : 1.0 -> 3.0 each
    assert cm.group_fwd_ms(0, CPU, 4) == pytest.approx(3.0 + 3.0)
    assert cm.group_fwd_ms(1, CPU, 4) == pytest.approx(3.0)
    # at 3 rows: interpolated per op between 2 rows (mm 2.0; relu 3.0 x 1/1.5 = 2.0; mm2 3.0 x 0.5/1.5 = 1.0)
    assert cm.group_fwd_ms(0, CPU, 3) == pytest.approx((2.0 + 3.0) / 2 + (2.0 + 3.0) / 2)
    assert cm.group_fwd_ms(1, CPU, 3) == pytest.approx((1.0 + 3.0) / 2)
    # backward at 4 rows: mm 8.0; relu 8.0 x 2/4 = 4.0; mm2 4.0; plus other 1.6 shared by in-step bwd (8 : 4 : 4)
    assert cm.group_bwd_ms(0, CPU, 4) == pytest.approx(8.0 + 0.8 + 4.0 + 0.4)
    assert cm.group_bwd_ms(1, CPU, 4) == pytest.approx(4.0 + 0.4)
    # update: in-step 0.8 shared 0.3 : 0.1 by the groups alone, then by bytes (w in {mm}; v in {relu, mm2})
    assert cm.update_ms(0, CPU) == pytest.approx(0.8 * 0.75)
    assert cm.update_ms(1, CPU) == pytest.approx(0.8 * 0.25)
    # sync copies interpolated in bytes
    assert cm.sync_copy_ms(CPU, 2000) == pytest.approx((0.2, 0.3))
    other = DeviceType("gpu", 10.0, 16.0, 900.0)
    assert cm.sync_copy_ms(other, 2000) == (0.0, 0.0)
    # another optimizer than the profile's: the roofline update
    sgd = ProfileCostModel(gg, TrainingConfig(optimizer="sgd"), _db(gg))
    assert sgd.update_ms(0, CPU) == pytest.approx(sgd.roofline.update_ms(0, CPU))


def test_measured_collective_rate_only_for_the_profiles_device_type():
    from tag.cost.profiled import MultiProfileCostModel

    gg = _gg()
    tc = TrainingConfig(optimizer="adam")
    other = DeviceType("gpu", 10.0, 16.0, 900.0)
    assert ProfileCostModel(gg, tc, _db(gg)).collective_hop_gbps(CPU, 2) is None  # default: the links' rate
    cm = ProfileCostModel(gg, tc, _db(gg), collective_gbps=13.5)
    assert cm.collective_hop_gbps(CPU, 2) == 13.5 and cm.collective_hop_gbps(other, 2) is None
    multi = MultiProfileCostModel(gg, tc, {"cpu": cm})
    assert multi.collective_hop_gbps(CPU, 4) == 13.5 and multi.collective_hop_gbps(other, 4) is None

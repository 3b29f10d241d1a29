"""The profile database: format round trip, validation, interpolation, and the profile-backed model."""

import json

import pytest

from tag.cost import ProfileCostModel, RooflineCostModel, make_cost_model
from tag.cost.profile_db import OpProfile, ProfileDB, interpolate, load, op_signature, save
from tag.errors import InputError
from tag.graph.groups import Group, GroupGraph
from tag.graph.opgraph import Op, OpGraph, TensorInfo
from tag.strategy import TrainingConfig
from tag.topology.cluster import DeviceType

DEV = DeviceType("TestGPU", 10.0, 16.0, 8000.0)
OTHER = DeviceType("Other", 10.0, 16.0, 8000.0)


def _gg():
    tensors = {"x": TensorInfo("x", "float32", (1, 16), batch_axis=0), "w": TensorInfo("w", "float32", (16, 16), role="param"),
               "y": TensorInfo("y", "float32", (1, 16), batch_axis=0)}
    ops = [Op("mm", "MatMul", "", ["x", "w"], ["y"], op_class="matmul", fwd_flops_per_row=512, bwd_flops_per_row=1024,
              mem_bytes_per_row=128, mem_bytes_fixed=1024, params=["w"], attrs={"a": 1}),
           Op("relu", "Relu", "", ["y"], ["z"], op_class="elementwise", mem_bytes_per_row=128)]
    graph = OpGraph("m.onnx", ops, tensors, ["x"], ["w"], ["z"], 1, 8)
    return GroupGraph(graph, [Group(0, [0, 1], True, param_count=256, param_bytes=1024, params=["w"])], [])


def test_signature_marks_batch_axis():
    gg = _gg()
    sig = op_signature(gg.graph.ops[0], gg.graph)
    assert sig.startswith("MatMul|Nx16,16x16|") and len(sig.split("|")[2]) == 8
    assert op_signature(gg.graph.ops[1], gg.graph).startswith("Relu|Nx16|")


def test_interpolate_between_beyond_and_single_point():
    xs, ys = [1, 2, 4], [1.0, 2.0, 3.0]
    assert interpolate(xs, ys, 2) == 2.0
    assert interpolate(xs, ys, 3) == pytest.approx(2.5)
    assert interpolate(xs, ys, 8) == pytest.approx(5.0)  # slope 0.5 per row from the last two
    assert interpolate([4], [2.0], 6) == pytest.approx(3.0)
    assert interpolate([2, 4], [1.0, 5.0], 1) == 0.0  # extrapolated below zero, clamped


def test_round_trip_and_profile_model(tmp_path):
    gg = _gg()
    sig = op_signature(gg.graph.ops[0], gg.graph)
    db = ProfileDB("TestGPU", 1, {"cpu": "test"}, {sig: OpProfile([1, 2, 4], [1.0, 2.0, 3.0])})
    path = tmp_path / "prof.json"
    save(db, str(path))
    back = load(str(path))
    assert back.ops[sig].rows == [1, 2, 4] and back.ops[sig].bwd_ms is None and back.device_type == "TestGPU"
    cm = make_cost_model(gg, TrainingConfig(), str(path))
    roof = RooflineCostModel(gg, TrainingConfig())
    assert isinstance(cm, ProfileCostModel) and cm.name == "profile:prof" and cm.matched_ops == 1
    from tag.cost.efficiency import params_for
    from tag.cost.roofline import launch_ms
    gpu = params_for("gpu")  # roofline for the op without a measurement (3 rows): memory-bound
    relu_ms = 3 * 128 / (1e9 * gpu.mem_efficiency * 384 / (384 + gpu.half_size_bytes)) + launch_ms(DEV)
    assert cm.group_fwd_ms(0, DEV, 3) == pytest.approx(2.5 + relu_ms)
    assert cm.group_bwd_ms(0, DEV, 3) == pytest.approx(roof.group_bwd_ms(0, DEV, 3))  # no bwd_ms measured
    assert cm.group_fwd_ms(0, OTHER, 3) == pytest.approx(roof.group_fwd_ms(0, OTHER, 3))
    assert cm.update_ms(0, DEV) == roof.update_ms(0, DEV)


@pytest.mark.parametrize("obj,where", [
    ({"version": 2, "device_type": "cpu", "ops": {}}, "version"),
    ({"version": 1, "ops": {}}, "device_type"),
    ({"version": 1, "device_type": "cpu", "ops": {"s": {"rows": [2, 1], "fwd_ms": [1, 2]}}}, 'ops["s"].rows'),
    ({"version": 1, "device_type": "cpu", "ops": {"s": {"rows": [1, 2], "fwd_ms": [1]}}}, 'ops["s"].fwd_ms'),
    ({"version": 1, "device_type": "cpu", "ops": {"s": {"rows": [1], "fwd_ms": [-1]}}}, 'ops["s"].fwd_ms[0]'),
])
def test_bad_profile_names_the_place(tmp_path, obj, where):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(InputError) as e:
        load(str(path))
    assert e.value.where == where and e.value.file == str(path)


def test_a_shard_slice_reads_the_profile_at_its_share_of_the_rows(tmp_path):
    """A measured op on `share` of its width has the FLOPs of the whole op at share x rows: its time is the
    profile interpolated there (measured 1.0 / 2.0 / 3.0 ms at 1 / 2 / 4 rows), not share x the time at rows."""
    gg = _gg()
    sig = op_signature(gg.graph.ops[0], gg.graph)
    db = ProfileDB("TestGPU", 1, {"cpu": "test"}, {sig: OpProfile([1, 2, 4], [1.0, 2.0, 3.0])})
    path = tmp_path / "prof.json"
    save(db, str(path))
    cm = make_cost_model(gg, TrainingConfig(), str(path))
    assert cm.ops_ms(0, DEV, 4, "fwd", [0]) == pytest.approx(3.0)
    assert cm.ops_ms(0, DEV, 4, "fwd", [0], share=0.5) == pytest.approx(2.0)  # at 2 rows (share x time: 1.5)
    assert cm.ops_ms(0, DEV, 4, "fwd", [0], share=0.25) == pytest.approx(1.0)  # at 1 row (0.75)
    assert cm.ops_ms(0, DEV, 2, "fwd", [0], share=0.75) == pytest.approx(1.5)  # at 1.5 rows, between 1 and 2

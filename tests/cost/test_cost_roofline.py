"""Roofline compute and update times against hand arithmetic."""

import pytest

from tag.cost import RooflineCostModel, make_cost_model
from tag.cost.efficiency import EfficiencyParams
from tag.graph.groups import Group, GroupGraph
from tag.graph.opgraph import Op, OpGraph
from tag.strategy import TrainingConfig
from tag.topology.cluster import DeviceType

# 10 TFLOP/s = 1e10 FLOP/ms; 8000 Gbit/s = 1e9 B/ms
DEV = DeviceType("T", peak_tflops=10.0, memory_gb=16.0, memory_bandwidth_gbps=8000.0)
CPU = DeviceType("cpu", peak_tflops=10.0, memory_gb=16.0, memory_bandwidth_gbps=8000.0, kind="cpu")
# Pinned nominal GPU parameters (matmul 0.7, elementwise 0.25, full bandwidth, 5 us launches, no size factor),
# so the arithmetic below checks the roofline formula, not the calibrated figures.
NOMINAL = {"gpu": EfficiencyParams()}


def _gg():
    ops = [
        Op("mm", "MatMul", "", [], [], op_class="matmul", fwd_flops_per_row=7e8, bwd_flops_per_row=1.4e9,
           mem_bytes_per_row=1e3, mem_bytes_fixed=4e6, params=["w"], param_count=1_000_000, param_bytes=4e6),
        Op("relu", "Relu", "", [], [], op_class="elementwise", fwd_flops_per_row=1e3, mem_bytes_per_row=1e6),
        Op("gen", "ConstantOfShape", "", [], [], op_class="other", fwd_flops_fixed=1e15, is_weight_generator=True),
    ]
    graph = OpGraph("m.onnx", ops, {}, [], ["w"], [], 1, 10)
    g = Group(0, [0, 1, 2], True, param_count=1_000_000, param_bytes=4e6, params=["w"])
    return GroupGraph(graph, [g], [])


def test_forward_is_sum_of_per_op_rooflines_plus_launch():
    cm = RooflineCostModel(_gg(), TrainingConfig(), NOMINAL)
    mm = max(7e9 / (1e10 * 0.7), (1e4 + 4e6) / 1e9) + 0.005  # compute-bound: 1 ms
    relu = max(1e4 / (1e10 * 0.25), 1e7 / 1e9) + 0.005  # memory-bound: 0.01 ms
    assert cm.group_fwd_ms(0, DEV, 10) == pytest.approx(mm + relu)
    assert cm.group_fwd_ms(0, DEV, 10) == pytest.approx(1.02)  # the weight generator costs nothing
    assert cm.group_fwd_ms(0, DEV, 0) == 0.0


def test_backward_uses_backward_flops_and_double_traffic():
    cm = RooflineCostModel(_gg(), TrainingConfig(), NOMINAL)
    mm = max(14e9 / 7e9, 2 * (1e4 + 4e6) / 1e9) + 2 * 0.005  # input- and weight-gradient kernels
    relu = 2 * 1e7 / 1e9 + 0.005
    assert cm.group_bwd_ms(0, DEV, 10) == pytest.approx(mm + relu)


def test_update_is_memory_bound_per_optimizer():
    adam = RooflineCostModel(_gg(), TrainingConfig(optimizer="adam"), NOMINAL)
    sgd = RooflineCostModel(_gg(), TrainingConfig(optimizer="sgd"), NOMINAL)
    mom = RooflineCostModel(_gg(), TrainingConfig(optimizer="momentum"), NOMINAL)
    # torch.optim foreach kernels, 4 bytes per tensor touched: adam 7 kernels / 18 tensors, sgd 1 / 3,
    # momentum 3 / 8 (tag/cost/optimizer.py)
    assert adam.update_ms(0, DEV) == pytest.approx(1e6 * 72 / 1e9 + 0.005)
    assert sgd.update_ms(0, DEV) == pytest.approx(1e6 * 12 / 1e9 + 0.005)
    assert mom.update_ms(0, DEV) == pytest.approx(1e6 * 32 / 1e9 + 0.005)


def test_cpu_launch_overhead_and_cache():
    cm = make_cost_model(_gg(), TrainingConfig())
    assert cm.name == "roofline"
    gpu, cpu = cm.group_fwd_ms(0, DEV, 10), cm.group_fwd_ms(0, CPU, 10)
    # same peaks; cpu efficiencies matmul 0.6 / elementwise memory-bound, 3 us launches
    assert cpu == pytest.approx(7e9 / (1e10 * 0.6) + 0.003 + 0.01 + 0.003)
    assert gpu != cpu
    assert cm.group_fwd_ms(0, CPU, 10) == cpu and ("fwd", 0, "cpu", 10) in cm._cache

"""Roofline times under fp32 / tf32 / bf16 / fp16 against hand arithmetic: one GEMM on a catalog A100, the weight
casts, NCHW layout transposes and fp16's loss-scale pass."""

import pytest

from tag.cost import RooflineCostModel
from tag.cost.efficiency import EfficiencyParams
from tag.graph.groups import Group, GroupGraph
from tag.graph.opgraph import Op, OpGraph
from tag.strategy import TrainingConfig
from tag.topology.catalog import CATALOG

A100 = CATALOG["A100-40GB"]  # datasheet: FP32 19.5 TFLOP/s, TF32 156, FP16 tensor 312 (dense), 1,555 GB/s
# Nominal parameters, so the arithmetic checks the formula, not calibrated figures: e_max matmul 0.7, full
# bandwidth, no size factor, no launch cost; tf32 reaches 0.6 and amp 0.5 of their tensor-core peaks.
NOMINAL = {"gpu": EfficiencyParams(launch_us=0.0).with_values(tc_matmul=0.6, amp_matmul=0.5)}
K = N = 4096  # y[M, N] = x[M, K] @ W[K, N]; one row of the batch is one row of x


def _gemm_graph():
    gemm = Op("gemm", "MatMul", "", [], [], op_class="matmul", fwd_flops_per_row=2.0 * K * N,
              bwd_flops_per_row=4.0 * K * N, mem_bytes_per_row=4.0 * (K + N), mem_bytes_fixed=4.0 * K * N,
              params=["W"], param_count=K * N, param_bytes=4.0 * K * N)
    graph = OpGraph("gemm.onnx", [gemm], {}, [], ["W"], [], 1, 1)
    return GroupGraph(graph, [Group(0, [0], True, param_count=K * N, param_bytes=4.0 * K * N, params=["W"])], [])


def _fwd_ms(precision, rows, params=NOMINAL, layout="nhwc", gg=None):
    cm = RooflineCostModel(gg or _gemm_graph(), TrainingConfig(precision=precision), params, conv_layout=layout)
    return cm.group_fwd_ms(0, A100, rows)


def test_large_gemm_is_compute_bound_at_each_precision_peak():
    M = 4096
    flops = 2.0 * M * K * N  # 1.374e11
    # fp32: 1.374e11 / (19.5e12 x 0.7) = 10.069 ms; its traffic (x, y and W in fp32: 201 MB) takes 0.129 ms
    assert _fwd_ms("fp32", M) == pytest.approx(flops / (19.5e12 * 0.7) * 1e3)
    assert _fwd_ms("fp32", M) == pytest.approx(10.069, rel=1e-4)
    # tf32: the TF32 peak x 0.6: 1.374e11 / (156e12 x 0.7 x 0.6) = 2.098 ms
    assert _fwd_ms("tf32", M) == pytest.approx(flops / (156e12 * 0.7 * 0.6) * 1e3)
    assert _fwd_ms("tf32", M) == pytest.approx(2.0976, rel=1e-4)
    # bf16: the 16-bit peak x 0.5 = 1.259 ms, plus the cast of W (16.8 M elements, read 4 + write 2 bytes each,
    # 100.7 MB) at 1,555 GB/s = 0.0647 ms
    cast_ms = K * N * 6 / 1555e9 * 1e3
    assert _fwd_ms("bf16", M) == pytest.approx(flops / (312e12 * 0.7 * 0.5) * 1e3 + cast_ms)
    assert _fwd_ms("bf16", M) == pytest.approx(1.2586 + 0.0647, rel=1e-3)
    assert _fwd_ms("fp16", M) == pytest.approx(_fwd_ms("bf16", M))  # same peak, same traffic in the forward


def test_small_gemm_is_memory_bound_and_bf16_halves_its_traffic():
    M = 8
    fp32_bytes = M * 4.0 * (K + N) + 4.0 * K * N  # x and y rows plus W: 67.4 MB
    # fp32: 67.4 MB / 1,555 GB/s = 0.0433 ms (its 2.7e8 FLOPs would take 0.0197 ms)
    assert _fwd_ms("fp32", M) == pytest.approx(fp32_bytes / 1555e9 * 1e3)
    assert _fwd_ms("fp32", M) == pytest.approx(0.043325, rel=1e-4)
    assert _fwd_ms("tf32", M) == pytest.approx(_fwd_ms("fp32", M))  # tf32 keeps fp32 storage
    # bf16: 16-bit x, y and weight copy = half the bytes, plus the fp32 -> bf16 cast of W
    assert _fwd_ms("bf16", M) == pytest.approx((fp32_bytes / 2 + K * N * 6) / 1555e9 * 1e3)
    assert _fwd_ms("bf16", M) == pytest.approx(0.021662 + 0.064735, rel=1e-4)


def test_backward_doubles_flops_and_traffic_and_casts_the_weight_gradient():
    M = 8
    cm = RooflineCostModel(_gemm_graph(), TrainingConfig(precision="bf16"), NOMINAL)
    fp32_bytes = M * 4.0 * (K + N) + 4.0 * K * N
    bwd_bytes = 2 * fp32_bytes / 2  # twice the forward traffic, in 16 bits
    # + the 16-bit weight gradient cast to the fp32 gradient: read 2, write 4 bytes per element
    assert cm.group_bwd_ms(0, A100, M) == pytest.approx((bwd_bytes + K * N * 6) / 1555e9 * 1e3)


def test_cast_launches_one_kernel_per_weight_tensor():
    with_launch = {"gpu": NOMINAL["gpu"].with_values(launch_us=20.0)}
    fp32 = _fwd_ms("fp32", 8, with_launch)
    bf16 = _fwd_ms("bf16", 8, with_launch)
    fp32_bytes = 8 * 4.0 * (K + N) + 4.0 * K * N
    assert fp32 == pytest.approx(fp32_bytes / 1555e9 * 1e3 + 0.020)  # the GEMM's own kernel
    assert bf16 == pytest.approx((fp32_bytes / 2 + K * N * 6) / 1555e9 * 1e3 + 0.020 + 0.020)  # + one cast


def _conv_graph():
    # a 3x3 convolution 64 -> 64 channels on 56 x 56: per row 2 x 3136 x 64 x 576 FLOPs, 2 x 64 x 3136 x 4 bytes
    # of fp32 activations (input read, output written) and 36,864 fp32 weights
    conv = Op("conv", "Conv", "", [], [], op_class="conv", fwd_flops_per_row=2.0 * 3136 * 64 * 576,
              bwd_flops_per_row=4.0 * 3136 * 64 * 576, mem_bytes_per_row=2 * 64 * 3136 * 4.0,
              mem_bytes_fixed=36864 * 4.0, params=["w"], param_count=36864, param_bytes=36864 * 4.0,
              attrs={"kernel_shape": [3, 3], "strides": [1, 1]})
    graph = OpGraph("conv.onnx", [conv], {}, [], ["w"], [], 1, 1)
    return GroupGraph(graph, [Group(0, [0], True, param_count=36864, param_bytes=36864 * 4.0, params=["w"])], [])


def test_nchw_convolutions_pay_two_transposes_of_their_16_bit_activations():
    p = {"gpu": NOMINAL["gpu"].with_values(launch_us=5.0)}
    rows = 32
    act16 = rows * 2 * 64 * 3136 * 2.0  # the conv's 16-bit input + output bytes: 25.7 MB
    gg = _conv_graph()
    nhwc = RooflineCostModel(gg, TrainingConfig(precision="fp16"), p, conv_layout="nhwc")
    nchw = RooflineCostModel(gg, TrainingConfig(precision="fp16"), p, conv_layout="nchw")
    # forward: input and output each read and written once more (2 x act16), two transpose kernels
    assert nchw.group_fwd_ms(0, A100, rows) - nhwc.group_fwd_ms(0, A100, rows) == pytest.approx(
        2 * act16 / 1555e9 * 1e3 + 2 * 0.005)
    # backward: twice the forward's traffic, so twice the transposes
    assert nchw.group_bwd_ms(0, A100, rows) - nhwc.group_bwd_ms(0, A100, rows) == pytest.approx(
        4 * act16 / 1555e9 * 1e3 + 4 * 0.005)
    # fp32 and tf32 pay no layout cost in this model
    for prec in ("fp32", "tf32"):
        a = RooflineCostModel(gg, TrainingConfig(precision=prec), p, conv_layout="nchw")
        b = RooflineCostModel(gg, TrainingConfig(precision=prec), p, conv_layout="nhwc")
        assert a.group_fwd_ms(0, A100, rows) == b.group_fwd_ms(0, A100, rows)
    with pytest.raises(ValueError):
        RooflineCostModel(gg, TrainingConfig(), p, conv_layout="chwn")


def test_fp16_update_adds_the_loss_scale_unscale_pass():
    # Adam's foreach kernels move 72 bytes per element (tag/cost/optimizer.py); fp16's GradScaler.unscale_ reads
    # and writes each fp32 gradient once more (8 bytes); bf16 needs no scaling; one launch per tensor (none here)
    for prec, per_param in (("fp32", 72), ("bf16", 72), ("fp16", 80)):
        cm = RooflineCostModel(_gemm_graph(), TrainingConfig(optimizer="adam", precision=prec), NOMINAL)
        assert cm.update_ms(0, A100) == pytest.approx(K * N * per_param / 1555e9 * 1e3), prec

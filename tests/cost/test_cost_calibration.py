"""The calibrated GPU cost model: one parameter set for every model, the right direction for peaks and
bandwidths, precision peaks, the published-row parser, and a check against published V100 figures."""

import os
from dataclasses import replace

import numpy as np
import pytest

from tag.cost import RooflineCostModel
from tag.cost.efficiency import GPU_PARAMS, EfficiencyParams, efficiency, params_for
from tag.graph.groups import Group, GroupGraph
from tag.graph.opgraph import Op, OpGraph
from tag.strategy import TrainingConfig
from tag.topology.catalog import CATALOG
from tag.topology.cluster import DeviceType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OP_CLASSES = {"conv", "matmul", "norm", "elementwise", "reduce", "pool", "softmax", "gather", "data_movement",
              "shape", "other", "rnn"}


def _mm(name="mm", fpr=2e9):
    return Op(name, "MatMul", "", [], [], op_class="matmul", fwd_flops_per_row=fpr, bwd_flops_per_row=2 * fpr,
              mem_bytes_per_row=1e4, mem_bytes_fixed=4e6, params=["w"], param_count=1_000_000, param_bytes=4e6)


def _relu(name="relu"):
    return Op(name, "Relu", "", [], [], op_class="elementwise", fwd_flops_per_row=1e3, mem_bytes_per_row=1e7)


def _gg(ops, name="m.onnx"):
    graph = OpGraph(name, ops, {}, [], ["w"], [], 1, 10)
    g = Group(0, list(range(len(ops))), True, param_count=1_000_000, param_bytes=4e6, params=["w"])
    return GroupGraph(graph, [g], [])


def test_parameters_are_per_class_not_per_model():
    # the parameter set is keyed by op class only: no model, file or device name anywhere in it
    assert set(GPU_PARAMS.base) <= OP_CLASSES
    assert params_for("gpu") is GPU_PARAMS
    # the same op in two unrelated models costs the same on the same device
    a = RooflineCostModel(_gg([_mm(), _relu()], "resnet.onnx"), TrainingConfig())
    b = RooflineCostModel(_gg([_relu("other_relu"), _relu("r2"), _mm("fc")], "bert.onnx"), TrainingConfig())
    v100 = CATALOG["V100-16GB"]
    ta, tb = a.op_ms(0, v100, 8, "fwd"), b.op_ms(0, v100, 8, "fwd")
    assert ta[0] == pytest.approx(tb[2]) and ta[1] == pytest.approx(tb[0])
    assert a.op_ms(0, v100, 8, "bwd")[0] == pytest.approx(b.op_ms(0, v100, 8, "bwd")[2])


def test_calibrated_formula_by_hand():
    p = GPU_PARAMS
    f, m = 4e9, 8e7  # a large GEMM: 50 FLOP/byte, far above any knee
    expect = p.base["matmul"] * f / (f + p.half_size_flops)
    if p.knee_intensity > 0:
        expect *= min(1.0, (f / m) / p.knee_intensity)
    assert efficiency("matmul", "gpu", f, m) == pytest.approx(expect)
    # a kernel of half_size_flops reaches half its class efficiency; big ones approach e_max
    if p.half_size_flops > 0:
        assert efficiency("conv", "gpu", p.half_size_flops, 1.0) == pytest.approx(p.base["conv"] / 2)
    assert efficiency("conv", "gpu", 1e13, 1e9) == pytest.approx(p.base["conv"], rel=1e-3)
    # one op's forward on a V100 from the datasheet figures: max(compute, memory) + one launch
    v100 = CATALOG["V100-16GB"]
    cm = RooflineCostModel(_gg([_mm()]), TrainingConfig())
    F, M = 2e9 * 8, 1e4 * 8 + 4e6
    eff = p.base["matmul"] * F / (F + p.half_size_flops)
    bw = 900e9 * p.mem_efficiency * (M / (M + p.half_size_bytes) if p.half_size_bytes else 1.0)
    hand_ms = max(F / (15.7e12 * eff), M / bw) * 1e3 + p.launch_us / 1e3
    assert cm.group_fwd_ms(0, v100, 8) == pytest.approx(hand_ms)


@pytest.mark.parametrize("field,scale", [("peak_tflops", 2.0), ("memory_bandwidth_gbps", 2.0)])
def test_faster_device_is_never_slower(field, scale):
    gg = _gg([_mm(), _relu()])
    base = CATALOG["V100-16GB"]
    fast = replace(base, name="fast", **{field: getattr(base, field) * scale})  # the model caches by name
    cm = RooflineCostModel(gg, TrainingConfig())
    for rows in (1, 8, 64):
        slow_ops, fast_ops = cm.op_ms(0, base, rows, "fwd"), cm.op_ms(0, fast, rows, "fwd")
        assert np.all(fast_ops <= slow_ops + 1e-12)
        assert cm.update_ms(0, fast) <= cm.update_ms(0, base)
    big = 64
    t_slow, t_fast = cm.op_ms(0, base, big, "fwd"), cm.op_ms(0, fast, big, "fwd")
    if field == "peak_tflops":  # the GEMM is compute-bound: faster; the ReLU is memory-bound: unchanged
        assert t_fast[0] < t_slow[0] and t_fast[1] == pytest.approx(t_slow[1])
    else:  # the ReLU and the optimizer update are memory-bound: faster; the GEMM unchanged
        assert t_fast[1] < t_slow[1] and t_fast[0] == pytest.approx(t_slow[0])
        assert cm.update_ms(0, fast) < cm.update_ms(0, base)


def test_real_model_moves_with_peak_and_bandwidth():
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    gg = coarsen(load_model(os.path.join(ROOT, "datasets", "models", "small_cnn.onnx"), batch_size=64))
    cm = RooflineCostModel(gg, TrainingConfig())
    dev = CATALOG["V100-16GB"]

    def total(d):
        return sum(cm.group_fwd_ms(g, d, 64) + cm.group_bwd_ms(g, d, 64) + cm.update_ms(g, d)
                   for g in range(gg.n_groups))

    t0 = total(dev)
    assert total(replace(dev, name="a", peak_tflops=dev.peak_tflops * 4)) < t0
    assert total(replace(dev, name="b", memory_bandwidth_gbps=dev.memory_bandwidth_gbps * 4)) < t0
    assert total(replace(dev, name="c", peak_tflops=dev.peak_tflops / 4)) > t0


def test_precision_reads_the_matching_peak():
    a100 = CATALOG["A100-40GB"]
    nominal = {"gpu": EfficiencyParams(launch_us=0.0).with_values(tc_matmul=0.5, tc_conv=0.25, amp_matmul=0.8)}
    gg = _gg([_mm(fpr=1e10), _relu()])
    fp32 = RooflineCostModel(gg, TrainingConfig(precision="fp32"), nominal).op_ms(0, a100, 4, "fwd")
    tf32 = RooflineCostModel(gg, TrainingConfig(precision="tf32"), nominal).op_ms(0, a100, 4, "fwd")
    amp = RooflineCostModel(gg, TrainingConfig(precision="fp16"), nominal).op_ms(0, a100, 4, "fwd")
    F = 4e10
    assert fp32[0] == pytest.approx(F / (19.5e12 * 0.7) * 1e3)
    assert tf32[0] == pytest.approx(F / (156e12 * 0.5 * 0.7) * 1e3)
    # the amp peak has its own fraction; plus the weight cast kernel: 1e6 weights x (4 + 2) bytes at 1,555 GB/s
    assert amp[0] == pytest.approx(F / (312e12 * 0.8 * 0.7) * 1e3 + 6e6 / 1555e9 * 1e3)
    assert tf32[1] == pytest.approx(fp32[1])  # elementwise ops stay on the FP32 pipes (memory-bound here)
    # a device without a tf32 figure falls back to its FP32 peak
    v100 = CATALOG["V100-16GB"]
    t_v = RooflineCostModel(gg, TrainingConfig(precision="tf32"), nominal).op_ms(0, v100, 4, "fwd")
    assert t_v[0] == pytest.approx(F / (15.7e12 * 0.7) * 1e3)


def test_published_row_parser():
    from tag.bench.published_rows import parse_rows, precision_class

    rows = [
        {"model": "ResNet-50 v1.5 (ImageNet 224)", "gpu": "V100-SXM2-16GB (DGX-1)", "precision": "FP32",
         "framework": "PyTorch", "batch_per_gpu": 128, "throughput": 370, "confidence": "high"},
        {"model": "ResNet-50 v1 (tf_cnn_benchmarks, synthetic 224)", "gpu": "A100-SXM4-40GB",
         "precision": "FP32 requested (TF32 convs by default)", "framework": "TF", "batch_per_gpu": 64,
         "throughput": 900, "confidence": "high"},
        {"model": "BERT-large pretraining phase 1 (seq 128, LAMB)", "gpu": "A100-SXM4-80GB (DGX A100)",
         "precision": "AMP (FP16 mixed)", "framework": "PyTorch", "batch_per_gpu": 256, "throughput": 580},
        {"model": "ResNet-50 (Torch7 fb.resnet, fwd+bwd only, no update)", "gpu": "GTX 1080 Ti (11GB)",
         "precision": "FP32", "framework": "Torch7", "batch_per_gpu": 16, "throughput": 158.1,
         "confidence": "excludes optimizer step; high"},
        {"model": "VGG-16", "gpu": "V100-SXM2-16GB", "precision": "FP32", "framework": "x", "batch_per_gpu": 1,
         "throughput": 1},
        {"model": "ResNet-50 v1.5", "gpu": "Mystery GPU", "precision": "FP32", "framework": "x",
         "batch_per_gpu": 1, "throughput": 1},
    ]
    got = parse_rows(rows)
    assert [(r.model_key, r.device, r.precision, r.no_update) for r in got] == [
        ("resnet50_v15", "V100-16GB", "fp32", False),
        ("resnet50_v1", "A100-40GB", "tf32", False),
        ("bert_large_s128", "A100-80GB", "amp", True),
        ("resnet50_v15", "GTX1080Ti-11GB", "fp32", True),
    ]
    assert precision_class("FP32 (TF 2.3: no TF32 path, see notes)") == "fp32"


def test_v100_resnet50_within_published_range():
    # five independent FP32 tables put ResNet-50 v1.5 on one V100 at 356-432 images/s (batch 96-296)
    from tag.bench.published_predict import predict_samples_per_s

    sps = predict_samples_per_s("resnet50_v15", "resnet50", "V100-16GB", 128)
    assert 356 * 0.85 <= sps <= 432 * 1.15
    # the same model on a GPU with half the peak and bandwidth is slower
    assert predict_samples_per_s("resnet50_v15", "resnet50", "P100-12GB", 128) < sps


def test_winograd_only_for_fp32_3x3_stride1_convs():
    from tag.cost.efficiency import winograd_eligible

    def conv(name, k, s, group=1, fpr=4e9):
        return Op(name, "Conv", "", [], [], op_class="conv", fwd_flops_per_row=fpr, bwd_flops_per_row=2 * fpr,
                  mem_bytes_per_row=1e5, attrs={"kernel_shape": [k, k], "strides": [s, s], "group": group})

    ops = [conv("c3", 3, 1), conv("c1", 1, 1), conv("c3s2", 3, 2), conv("dw", 3, 1, group=64)]
    assert [winograd_eligible(o) for o in ops] == [True, False, False, False]
    p = {"gpu": EfficiencyParams(launch_us=0.0).with_values(winograd_speedup=2.0, tc_conv=1.0)}
    v100 = CATALOG["V100-16GB"]
    t = RooflineCostModel(_gg(ops), TrainingConfig(), p).op_ms(0, v100, 4, "fwd")
    direct = 1.6e10 / (15.7e12 * 0.6) * 1e3  # e_max conv 0.6, compute-bound
    assert t[0] == pytest.approx(direct / 2.0)
    assert t[1] == pytest.approx(direct) and t[2] == pytest.approx(direct) and t[3] == pytest.approx(direct)
    a100 = CATALOG["A100-40GB"]  # tf32 convs run as tensor-core implicit GEMM: no Winograd factor
    t_tf32 = RooflineCostModel(_gg(ops), TrainingConfig(precision="tf32"), p).op_ms(0, a100, 4, "fwd")
    assert t_tf32[0] == pytest.approx(1.6e10 / (156e12 * 0.6) * 1e3)

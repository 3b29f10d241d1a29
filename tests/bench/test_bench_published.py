"""The published comparison's inputs ship with tag, and its derived figures by hand."""

import pytest

from tag.bench.data import published_table
from tag.bench.published import SCALING_MODELS, ScalingResult
from tag.bench.published_predict import model_path
from tag.bench.published_rows import parse_rows, read_table


def test_every_row_and_scaling_model_has_a_graph():
    rows = parse_rows(read_table(published_table("gpu-training-throughput.json")))
    assert len([r for r in rows if r.precision in ("fp32", "tf32")]) >= 40
    keys = {r.model_key for r in rows} | set(SCALING_MODELS.values()) | {"resnet50_v15"}
    for key in sorted(keys):
        assert model_path(key).is_file(), key
    for sysrow in read_table(published_table("scaling.json")):
        assert sysrow["source"] and set(sysrow["per_gpu_batch"]) >= {"ResNet-50"}


def test_scaling_figures_by_hand():
    s = ScalingResult("ResNet-50", "DGX-1 P100", 64, published_1gpu=200.0, predicted_1gpu=250.0,
                      published_8gpu=1500.0, predicted_8gpu=1800.0)
    assert s.error_1gpu_pct == pytest.approx(25.0)  # (250 - 200) / 200
    assert s.published_efficiency_pct == pytest.approx(93.75)  # 1500 / (8 x 200)
    assert s.predicted_efficiency_pct == pytest.approx(90.0)  # 1800 / (8 x 250)


def test_fitted_ring_rate_reproduces_its_row_and_rises_with_the_target():
    """The bisection returns a rate at which the fitted row's predicted 8-GPU efficiency is the target, and a
    higher target needs a faster ring (efficiency rises with the rate)."""
    from tag.bench.published import fit_effective_gbps
    from tag.bench.published_predict import predict_samples_per_s

    one = predict_samples_per_s("vgg16", "vgg16", "P100-16GB", 64)

    def eff(rate):
        return 100.0 * predict_samples_per_s("vgg16", "vgg16", "P100-16GB", 512, count=8, intra_gbps=rate,
                                             overlap_sync=False) / (8 * one)

    r80 = fit_effective_gbps("vgg16", "vgg16", "P100-16GB", 64, 80.0, None)
    r90 = fit_effective_gbps("vgg16", "vgg16", "P100-16GB", 64, 90.0, None)
    assert abs(eff(r80) - 80.0) < 0.05 and abs(eff(r90) - 90.0) < 0.05
    assert r90 > r80

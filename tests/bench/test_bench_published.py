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

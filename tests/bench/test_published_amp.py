"""The published AMP rows: the fit / held-out split, the convolution layouts read from the rows, and the held-out
MAPE of the shipped parameters."""

from tag.bench.data import published_table
from tag.bench.published import AMP_FIT_DEVICES, amp_split
from tag.bench.published_predict import predict_rows
from tag.bench.published_rows import conv_layout, parse_rows, read_table
from tag.cost.calibrate import mape


def _rows():
    return parse_rows(read_table(published_table("gpu-training-throughput.json")))


def test_amp_fit_and_held_out_rows_are_disjoint_and_cover_every_amp_row():
    rows = _rows()
    fit, held = amp_split(rows)
    amp = [r for r in rows if r.precision == "amp"]
    assert fit and held
    assert not {id(r) for r in fit} & {id(r) for r in held}
    assert not set(fit) & set(held)  # no held-out row equals a fitted one either
    assert sorted(map(id, fit + held)) == sorted(map(id, amp))
    assert {r.device for r in fit} == set(AMP_FIT_DEVICES)
    assert not {r.device for r in held} & set(AMP_FIT_DEVICES)
    # both families are in each part
    assert {r.family for r in fit} == {r.family for r in held} == {"resnet50", "bert_large"}


def test_conv_layout_from_the_row_texts():
    assert conv_layout("AMP (FP16 mixed, NHWC)", "PyTorch (NGC 21.03)") == "nhwc"
    assert conv_layout("AMP + XLA", "TensorFlow 1.15 (NGC 20.06-tf1)") == "nhwc"
    assert conv_layout("AMP (FP16 mixed)", "MXNet (NGC 22.10)") == "nhwc"
    assert conv_layout("AMP (FP16 mixed)", "PyTorch (NGC 20.06)") == "nchw"
    assert conv_layout("AMP (FP16 mixed)", "PyTorch 1.13 (NGC 22.09), DLE ConvNets main.py") == "nchw"


def test_shipped_parameters_predict_held_out_amp_rows_within_20_percent():
    _fit, held = amp_split(_rows())
    pred = predict_rows(held)
    assert mape(pred, [r.published for r in held]) <= 20.0

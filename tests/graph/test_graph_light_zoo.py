"""Every light ONNX zoo model through `tag inspect`; published figures for ResNet-50, VGG-19, AlexNet."""

import glob
import json
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tag.cli import main
from tag.graph import load_model

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
MODELS = sorted(glob.glob(os.path.join(LIGHT, "light_*.onnx")))


def _inspect_json(capsys, *argv):
    rc = main(["inspect", *argv, "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)


def _generated_params(path):
    """Second method: the light zoo's weights are ConstantOfShape outputs (count their elements from the shape
    initializers) plus the float initializers of more than one element (one-element ones are constants)."""
    m = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    generated = sum(int(np.prod(inits[n.input[0]])) for n in m.graph.node if n.op_type == "ConstantOfShape")
    return generated + sum(v.size for v in inits.values() if v.dtype == np.float32 and v.size > 1)


def test_light_zoo_present():
    assert len(MODELS) >= 9


@pytest.mark.parametrize("path", MODELS, ids=[os.path.basename(p) for p in MODELS])
def test_inspect_every_light_model(capsys, path):
    s = _inspect_json(capsys, path)
    for key in ("ops", "params", "forward_flops_per_sample", "unknown_shapes", "groups", "batch_size"):
        assert key in s
    assert s["unknown_shapes"] == 0
    assert s["batch_size"] == 32  # file batch 1 -> 32 per device
    assert s["params"] == _generated_params(path)
    assert s["ops"] == len(onnx.load(path).graph.node)


@pytest.mark.parametrize("name, params_m, gmac", [
    ("light_resnet50.onnx", 25.6, 4.1),
    ("light_vgg19.onnx", 143.7, 19.6),
    ("light_bvlc_alexnet.onnx", 61.0, None),
])
def test_published_figures(name, params_m, gmac):
    g = load_model(os.path.join(LIGHT, name))
    assert abs(g.param_count / 1e6 - params_m) / params_m < 0.01
    if gmac is not None:
        fwd = sum(op.fwd_flops_per_row for op in g.ops)
        assert abs(fwd / 2e9 - gmac) / gmac < 0.10


def test_resnet50_batch_constant_and_generators():
    g = load_model(os.path.join(LIGHT, "light_resnet50.onnx"), batch_size=96)
    assert g.batch_size == 96 and g.file_batch == 1
    assert g.data_inputs == ["gpu_0/data_0"]
    # the only baked-batch constant is the Reshape target [1, 2048] before the classifier
    reshape = next(op for op in g.ops if op.op_type == "Reshape")
    assert [(b.tensor, b.index, b.value) for b in g.batch_constants] == [(reshape.inputs[1], 0, 1)]
    gens = [op for op in g.ops if op.is_weight_generator]
    assert len(gens) == 239 and all(op.fwd_flops_per_row == 0 and op.fwd_flops_fixed == 0 for op in gens)
    assert all(not op.batched for op in gens)
    assert all(op.splittable for op in g.ops)
    # first conv: 7x7x3 -> 64 at 112x112: 2 * 64*112*112 * 147 FLOP, weights 9408 counted on it
    conv = g.ops[g.op_index()["n0"]] if "n0" in g.op_index() else next(op for op in g.ops if op.op_type == "Conv")
    assert conv.fwd_flops_per_row == 2 * 64 * 112 * 112 * 3 * 7 * 7
    assert conv.bwd_flops_per_row == 2 * conv.fwd_flops_per_row
    assert conv.param_count == 64 * 3 * 7 * 7
    assert conv.out_bytes_per_row == 64 * 112 * 112 * 4
    assert conv.saved_bytes_per_row == 3 * 224 * 224 * 4  # its input
    assert conv.mem_bytes_per_row == (3 * 224 * 224 + 64 * 112 * 112) * 4
    assert conv.mem_bytes_fixed == 64 * 3 * 7 * 7 * 4


def test_shufflenet_channel_shuffle_constants():
    g = load_model(os.path.join(LIGHT, "light_shufflenet.onnx"))
    reshapes = [op for op in g.ops if op.op_type == "Reshape"]
    assert len(g.batch_constants) == len(reshapes) == 33
    assert all(b.index == 0 and b.value == 1 for b in g.batch_constants)
    assert all(g.tensors[o].batch_axis == 0 for op in reshapes for o in op.outputs)

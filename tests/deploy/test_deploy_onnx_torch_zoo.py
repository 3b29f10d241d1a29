"""Forward equality of the torch converter with onnx.reference.ReferenceEvaluator (issue 11).

Every node output (not only the graph outputs) is compared, rtol 1e-4, on every light zoo model (opset 9,
weights randomised, see _onnx_torch_ref.randomize_generators; one model also on its original
generators) and on every datasets model at batch 2 — the tiny variants stand in for the deep ones
(resnet_tiny for ResNet-50/101, inception_tiny for Inception-v3, bert_tiny / gpt2_tiny / transformer_tiny /
dlrm_tiny for BERT-large / GPT-2 medium / Transformer-base / DLRM; light_vgg19 for VGG-19) and fc_wide
runs in full with weights stored as graph inputs, fed to the evaluator as the program's seeded values.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
import torch

from tag.deploy.onnx_torch import TorchProgram

from _onnx_torch_ref import all_intermediates, randomize_generators, reference

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models")
LIGHT_NAMES = sorted(os.path.basename(p)[len("light_"):-len(".onnx")] for p in glob.glob(os.path.join(LIGHT, "light_*.onnx")))
DATASET_NAMES = ["mlp", "small_cnn", "small_transformer", "resnet_tiny", "inception_tiny", "bert_tiny", "gpt2_tiny",
                 "transformer_tiny", "dlrm_tiny", "fc_wide"]


def _compare_all(model: onnx.ModelProto, prog: TorchProgram, feeds: dict[str, np.ndarray], rows: int,
                 extra_feeds: dict[str, np.ndarray] | None = None) -> int:
    """Run both on feeds; assert every float/int node output matches; return how many were compared."""
    with torch.no_grad():
        env = prog.run_ops(range(len(prog.nodes)), {k: torch.from_numpy(v) for k, v in feeds.items()}, rows)
    full, names = all_intermediates(model)
    ref = reference(full).run(None, {**feeds, **(extra_feeds or {})})
    compared = 0
    for name, want in zip(names, ref):
        if name in prog.param_names:  # generated weights (light zoo): checked on their own below
            continue
        got = env[name].detach().numpy()
        assert got.shape == want.shape, name
        if want.dtype == np.bool_:
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            scale = max(1.0, float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0)))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=name)
        compared += 1
    return compared


def _light_feeds(model: onnx.ModelProto, prog: TorchProgram, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    return {n: rng.random(shapes[n], dtype=np.float32) for n in prog.data_inputs}


@pytest.mark.parametrize("name", LIGHT_NAMES)
def test_light_zoo_matches_reference(name):
    torch.set_num_threads(1)
    model = randomize_generators(onnx.load(os.path.join(LIGHT, f"light_{name}.onnx")), seed=1)
    prog = TorchProgram(model)
    assert len(prog.data_inputs) == 1  # the image, found although it is not graph input 0
    compared = _compare_all(model, prog, _light_feeds(model, prog, 0), rows=1)
    assert compared >= len(model.graph.node) - sum(n.op_type == "ConstantOfShape" for n in model.graph.node)


def test_light_zoo_original_generators_become_parameters():
    model = onnx.load(os.path.join(LIGHT, "light_squeezenet.onnx"))
    prog = TorchProgram(model)
    generated = [n.output[0] for n in model.graph.node if n.op_type == "ConstantOfShape"]
    assert set(generated) <= set(prog.param_names)
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    node = next(n for n in model.graph.node if n.op_type == "ConstantOfShape")
    p = prog.param(node.output[0])
    assert isinstance(p, torch.nn.Parameter) and tuple(p.shape) == tuple(consts[node.input[0]])
    assert torch.all(p == torch.tensor(0.02))
    _compare_all(model, prog, _light_feeds(model, prog, 3), rows=1)


def _dataset_feeds(model: onnx.ModelProto, prog: TorchProgram, batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in model.graph.input:
        if i.name not in prog.data_inputs:
            continue
        shape = [batch] + [d.dim_value for d in i.type.tensor_type.shape.dim[1:]]
        if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[i.name] = rng.integers(0, 16, size=shape).astype(np.int64)  # valid for every vocabulary here
        else:
            feeds[i.name] = rng.random(shape, dtype=np.float32)
    return feeds


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_datasets_model_matches_reference(name):
    torch.set_num_threads(1)
    from tag.graph.load import load_model

    path = os.path.join(MODELS, f"{name}.onnx")
    model = onnx.load(path)
    graph = load_model(path)
    prog = TorchProgram(model, graph, seed=5)
    inits = {t.name for t in model.graph.initializer}
    weights_as_inputs = {n: prog.param(n).detach().numpy() for n in prog.param_names if n not in inits}
    assert (name == "fc_wide") == bool(weights_as_inputs)
    compared = _compare_all(model, prog, _dataset_feeds(model, prog, 2, 0), rows=2, extra_feeds=weights_as_inputs)
    assert compared > 0

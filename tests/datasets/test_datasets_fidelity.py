"""The small committed models compute what their torch builders compute, at a batch other than the export's.

Second method: the torch module rebuilt with the build seed (eager) vs onnx.reference on the committed file.
"""

import os

import numpy as np
import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator

from zoo import MODELS

DATASETS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "datasets")
MODELS_DIR = os.path.join(DATASETS, "models")

SMALL = ["mlp", "small_cnn", "resnet_tiny", "dlrm_tiny", "gpt2_tiny", "bert_tiny", "transformer_tiny",
         "small_transformer", "inception_tiny"]


@pytest.mark.parametrize("name", SMALL)
def test_onnx_matches_torch_at_batch_3(name):
    spec = MODELS[name]
    torch.manual_seed(0)
    module = spec.build().eval()
    rng = np.random.default_rng(1)
    feeds = {}
    for inp in spec.inputs:
        shape = (3,) + tuple(inp.shape[1:])
        if inp.dtype == "int64":
            feeds[inp.name] = rng.integers(0, inp.high, size=shape, dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        expected = module(*(torch.from_numpy(feeds[i.name]) for i in spec.inputs))
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = ReferenceEvaluator(onnx.load(os.path.join(MODELS_DIR, f"{name}.onnx"))).run(None, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == tuple(e.shape)
        np.testing.assert_allclose(g, e.numpy(), rtol=2e-4, atol=2e-4)


def test_dlrm_tiny_interaction_by_hand():
    """Recompute dlrm_tiny with numpy from the file's own weights: bottom MLP, lookups, lower-triangle dots."""
    model = onnx.load(os.path.join(MODELS_DIR, "dlrm_tiny.onnx"))
    w = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    rng = np.random.default_rng(2)
    dense = rng.standard_normal((3, 13)).astype(np.float32)
    sparse = rng.integers(0, 1000, size=(3, 4), dtype=np.int64)
    x = np.maximum(dense @ w["bottom.0.weight"].T + w["bottom.0.bias"], 0)
    x = np.maximum(x @ w["bottom.2.weight"].T + w["bottom.2.bias"], 0)
    vecs = [x] + [w[f"tables.{t}.weight"][sparse[:, t]] for t in range(4)]
    dots = [np.sum(vecs[i] * vecs[j], axis=1) for i in range(5) for j in range(i)]
    h = np.concatenate([x, np.stack(dots, axis=1)], axis=1)
    h = np.maximum(h @ w["top.0.weight"].T + w["top.0.bias"], 0)
    out = 1 / (1 + np.exp(-(h @ w["top.2.weight"].T + w["top.2.bias"])))
    got = ReferenceEvaluator(model).run(None, {"dense": dense, "sparse": sparse})[0]
    np.testing.assert_allclose(got, out, rtol=1e-4, atol=1e-5)

"""Gradients through the converter equal those of the same network written in torch (issue 11, point 3).

The torch networks are the datasets zoo builders (datasets/zoo) the ONNX files were exported from, with the
file's initializer values loaded by name (BatchNorm in eval mode, Dropout off, as the inference graphs are).
The loss weights every output element by a fixed random tensor, so every output element matters.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from tag.deploy.onnx_torch import TorchProgram
from tag.graph.load import load_model

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODELS = os.path.join(ROOT, "datasets", "models")


def _torch_twin(name: str, model: onnx.ModelProto) -> torch.nn.Module:
    sys.path.insert(0, os.path.join(ROOT, "datasets"))
    try:
        from zoo import MODELS as SPECS
    finally:
        sys.path.pop(0)
    net = SPECS[name].build()
    values = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    state = net.state_dict()
    loaded = {k: values[k] for k in state if k in values}
    assert set(state) - set(loaded) <= {k for k in state if k.endswith("num_batches_tracked")}
    net.load_state_dict(loaded, strict=False)
    return net.eval()


def _inputs(name: str, rows: int) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(7)
    if name == "small_cnn":
        return (torch.from_numpy(rng.standard_normal((rows, 3, 32, 32), dtype=np.float32)),)
    return (torch.from_numpy(rng.integers(0, 1000, size=(rows, 32))),)


@pytest.mark.parametrize("name", ["small_cnn", "small_transformer"])
def test_gradients_equal_torch(name):
    torch.set_num_threads(1)
    path = os.path.join(MODELS, f"{name}.onnx")
    model = onnx.load(path)
    prog = TorchProgram(model, load_model(path))
    net = _torch_twin(name, model)
    inputs = _inputs(name, 3)
    y_prog = prog(*inputs)
    y_net = net(*inputs)
    torch.testing.assert_close(y_prog, y_net, rtol=1e-4, atol=1e-5)
    w = torch.from_numpy(np.random.default_rng(8).standard_normal(tuple(y_net.shape), dtype=np.float32))
    (y_prog * w).sum().backward()
    (y_net * w).sum().backward()
    compared = 0
    for pname, p in net.named_parameters():
        got = prog.param(pname).grad
        assert got is not None, pname
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-5 * max(1.0, p.grad.abs().max().item()))
        compared += 1
    assert compared == len(list(net.parameters())) and compared >= 8


@pytest.mark.parametrize("name", ["resnet_tiny", "inception_tiny", "bert_tiny", "gpt2_tiny", "transformer_tiny",
                                  "dlrm_tiny"])
def test_every_parameter_receives_a_gradient(name):
    """Backward reaches every parameter of every tiny model (Gather tables, tied weights, LayerNorm, BN stats)."""
    torch.set_num_threads(1)
    path = os.path.join(MODELS, f"{name}.onnx")
    graph = load_model(path)
    prog = TorchProgram(onnx.load(path), graph, seed=1)
    rng = np.random.default_rng(2)
    inputs = []
    for n in graph.data_inputs:
        t = graph.tensors[n]
        shape = (2,) + tuple(t.shape[1:])
        inputs.append(torch.from_numpy(rng.integers(0, 16, size=shape)) if t.dtype == "int64"
                      else torch.from_numpy(rng.random(shape, dtype=np.float32)))
    outs = prog(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    sum(o.float().square().mean() for o in outs if o.dtype.is_floating_point).backward()
    missing = [n for n in prog.param_names if prog.param(n).grad is None]
    assert not missing
    assert all(torch.isfinite(prog.param(n).grad).all() for n in prog.param_names)
    nonzero = sum(bool(prog.param(n).grad.abs().sum() > 0) for n in prog.param_names)
    assert nonzero >= 0.9 * len(prog.param_names)

"""`--export model.onnx` of a model whose file keeps its weights in external data writes the trained model the same
way (PATH and PATH.data, readable by onnx.load), so a model too big for one protobuf stays exportable; a model with
embedded weights stays one file. Values are read back with onnx's own loader."""

from __future__ import annotations

import os

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import uses_external_data

from tag.deploy.checkpoint import export_weights


def _model(path: str, external: bool) -> None:
    w = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(4, 6), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, path, save_as_external_data=external, all_tensors_to_one_file=True,
                    location=os.path.basename(path) + ".weights", size_threshold=0)


def test_external_data_in_external_data_out(tmp_path):
    src, out = str(tmp_path / "m.onnx"), str(tmp_path / "trained.onnx")
    _model(src, external=True)
    trained = torch.full((4, 6), 0.5)
    export_weights(out, {"w": trained}, src)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.weights", "trained.onnx",
                                                           "trained.onnx.data"]
    raw = onnx.load(out, load_external_data=False)
    assert all(uses_external_data(t) for t in raw.graph.initializer)
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}["w"]
    assert w.dtype == np.float32 and np.array_equal(w, np.full((4, 6), 0.5, np.float32))
    src_w = numpy_helper.to_array(onnx.load(src).graph.initializer[0])  # the input model is untouched
    assert np.array_equal(src_w, np.arange(24, dtype=np.float32).reshape(4, 6))


def test_embedded_weights_stay_one_file(tmp_path):
    src, out = str(tmp_path / "m.onnx"), str(tmp_path / "trained.onnx")
    _model(src, external=False)
    export_weights(out, {"w": torch.ones(4, 6)}, src)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "trained.onnx"]
    assert np.array_equal(numpy_helper.to_array(onnx.load(out).graph.initializer[0]), np.ones((4, 6), np.float32))

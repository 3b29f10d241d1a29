"""The committed zoo files: valid ONNX, one per model in build.py's list, symbolic batch on data inputs."""

import os
import re

import onnx
import pytest

from zoo import MODELS

DATASETS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "datasets")
MODELS_DIR = os.path.join(DATASETS, "models")

FILES = sorted(f[:-5] for f in os.listdir(MODELS_DIR) if f.endswith(".onnx"))
INT_TYPES = {onnx.TensorProto.INT64: "int64", onnx.TensorProto.FLOAT: "float32"}


def test_model_list_matches_committed_files():
    assert FILES == sorted(MODELS)


def test_build_script_lists_the_same_models(capsys):
    import importlib.util
    spec = importlib.util.spec_from_file_location("zoo_build", os.path.join(DATASETS, "build.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert build.main(["--list"]) == 0
    assert sorted(capsys.readouterr().out.split()) == FILES
    assert build.main(["no_such_model"]) == 2


def test_readme_has_one_line_per_model():
    with open(os.path.join(MODELS_DIR, "README.md")) as f:
        names = re.findall(r"^- `(\w+)\.onnx`", f.read(), flags=re.M)
    assert sorted(names) == FILES


@pytest.mark.parametrize("name", FILES)
def test_checker_opset_and_inputs(name):
    path = os.path.join(MODELS_DIR, f"{name}.onnx")
    onnx.checker.check_model(path)
    model = onnx.load(path)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    spec = MODELS[name]
    inputs = {v.name: v for v in model.graph.input}
    for inp in spec.inputs:
        t = inputs[inp.name].type.tensor_type
        dims = t.shape.dim
        assert dims[0].dim_param == "batch", f"{name}:{inp.name} axis 0 is not the symbolic batch"
        assert [d.dim_value for d in dims[1:]] == list(inp.shape[1:])
        assert INT_TYPES[t.elem_type] == inp.dtype
    # Only data inputs may carry a symbolic dim; every other input is a fixed-shape weight.
    for value in model.graph.input:
        if value.name in {i.name for i in spec.inputs}:
            continue
        assert all(d.HasField("dim_value") for d in value.type.tensor_type.shape.dim), value.name
    size_mb = os.path.getsize(path) / 1e6
    if spec.weights_as_inputs:
        assert size_mb < 5 and not any(i.data_type == onnx.TensorProto.FLOAT for i in model.graph.initializer)
    assert size_mb < 20


def test_big_models_keep_batchnorm_layernorm_and_integer_constants():
    ops = {n: {node.op_type for node in onnx.load(os.path.join(MODELS_DIR, f"{n}.onnx")).graph.node}
           for n in ("resnet50", "inception_v3", "bert_large")}
    assert "BatchNormalization" in ops["resnet50"] and "BatchNormalization" in ops["inception_v3"]
    assert "LayerNormalization" in ops["bert_large"] and "Gelu" in ops["bert_large"] | {"Erf"}
    dlrm = onnx.load(os.path.join(MODELS_DIR, "dlrm.onnx"))
    pairs = [onnx.numpy_helper.to_array(i) for i in dlrm.graph.initializer if i.name == "pair_index"]
    # Strictly lower triangle of the 9 x 9 dot-product matrix, row-major flattened.
    assert pairs and pairs[0].tolist() == [i * 9 + j for i in range(9) for j in range(i)]


@pytest.mark.parametrize("name", FILES)
def test_shape_inference_leaves_only_the_batch_symbolic(name):
    """After onnx shape inference every node output has a shape whose only symbolic dim is `batch`."""
    model = onnx.shape_inference.infer_shapes(onnx.load(os.path.join(MODELS_DIR, f"{name}.onnx")), data_prop=True)
    known = {v.name: v for v in list(model.graph.value_info) + list(model.graph.output)}
    for node in model.graph.node:
        for out in node.output:
            assert out in known and known[out].type.tensor_type.HasField("shape"), f"{name}: {out} unknown"
            dims = known[out].type.tensor_type.shape.dim
            assert all(d.HasField("dim_value") or d.dim_param == "batch" for d in dims), \
                f"{name}: {node.op_type} output {out} has shape {dims}"
    if any(n.op_type == "Conv" for n in model.graph.node):
        assert not any(n.op_type == "CastLike" for n in model.graph.node)


@pytest.mark.parametrize("name", FILES)
def test_outputs_follow_a_concrete_batch(name):
    """With `batch` fixed to 5 (not the export batch 2) and the exporter's value_info and output shapes
    removed, onnx shape inference alone gives every node a shape and every output 5 rows: no baked batch."""
    model = onnx.load(os.path.join(MODELS_DIR, f"{name}.onnx"))
    data = {i.name for i in MODELS[name].inputs}
    for value in model.graph.input:
        if value.name in data:
            value.type.tensor_type.shape.dim[0].dim_value = 5
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True, strict_mode=True)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for node in inferred.graph.node:
        for out in node.output:
            assert out in known and known[out].type.tensor_type.HasField("shape"), f"{name}: {out} unknown"
    for out in inferred.graph.output:
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in out.type.tensor_type.shape.dim]
        assert dims[0] == 5 and all(isinstance(d, int) and d > 0 for d in dims), f"{name}: {out.name} {dims}"

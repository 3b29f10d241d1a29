"""Group-by-group execution on uneven row maps equals the whole-model run (issue 11, point 2).

The op list (OpGraph order) is cut into contiguous groups at arbitrary boundaries; each group runs on
per-"device" row slices (e.g. 3 + 5 of 8 rows) through `TorchProgram.run_ops`, with batched tensors sliced on
their batch axis and unbatched ones passed whole, and the slices are stitched back between groups. Light
shufflenet bakes batch 1 into its Reshape targets (batch constants); bert_tiny / gpt2_tiny build their
targets from Shape, so both mechanisms must follow the rows.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import torch

from tag.deploy.onnx_torch import TorchProgram, rewrite_batch_constant
from tag.graph.load import load_model

from _onnx_torch_ref import randomize_generators

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models")


def _run_split(prog: TorchProgram, graph, feeds: dict[str, torch.Tensor], cuts: list[int],
               row_maps: list[list[int]]) -> dict[str, torch.Tensor]:
    """Run groups ops[cuts[i]:cuts[i+1]] each on the row slices row_maps[i]; return every tensor, stitched.

    Integer unbatched tensors (shape arithmetic: Shape, Gather on shapes, Concat of shapes, ...) depend on
    the rows a device runs, so, as the deploy runtime does, each device re-runs the earlier ones for its rows.
    """
    full = dict(feeds)
    shape_ops = [i for i, op in enumerate(graph.ops)
                 if all(graph.tensors[o].batch_axis is None and not graph.tensors[o].dtype.startswith(("float", "bfloat"))
                        for o in op.outputs if o)]
    for (lo, hi), rows_per_dev in zip(zip(cuts[:-1], cuts[1:]), row_maps):
        outs: list[dict[str, torch.Tensor]] = []
        start = 0
        for rows in rows_per_dev:
            env = {}
            for name, t in full.items():
                axis = graph.tensors[name].batch_axis if name in graph.tensors else None
                env[name] = t if axis is None else t.narrow(axis, start, rows)
            res = prog.run_ops([i for i in shape_ops if i < lo] + list(range(lo, hi)), env, rows)
            outs.append({k: v for k, v in res.items() if k not in env})
            start += rows
        for name in outs[0]:
            axis = graph.tensors[name].batch_axis
            if axis is None:
                if not outs[0][name].dtype.is_floating_point:
                    continue  # shape arithmetic: recomputed per device
                for o in outs[1:]:  # unbatched float results (parameter-derived) must agree across devices
                    torch.testing.assert_close(o[name], outs[0][name])
                full[name] = outs[0][name]
            else:
                full[name] = torch.cat([o[name] for o in outs], dim=axis)
    return full


def _assert_outputs_equal(prog, whole, split):
    for name in prog.outputs:
        torch.testing.assert_close(split[name], whole[name], rtol=1e-5, atol=1e-6)


def test_light_shufflenet_groups_rows_3_and_5(tmp_path):
    torch.set_num_threads(1)
    path = tmp_path / "shufflenet.onnx"
    onnx.save(randomize_generators(onnx.load(os.path.join(LIGHT, "light_shufflenet.onnx")), seed=2), path)
    graph = load_model(str(path))
    assert graph.batch_constants and graph.file_batch == 1  # Reshape targets such as [1, 4, 28, 56, 56]
    prog = TorchProgram(onnx.load(path), graph)
    x = torch.from_numpy(np.random.default_rng(0).random((8, 3, 224, 224), dtype=np.float32))
    with torch.no_grad():
        whole = prog.run_ops(range(len(prog.nodes)), {graph.data_inputs[0]: x}, 8)
        n = len(prog.nodes)
        cuts = [0, n // 5, n // 2 + 3, n - 7, n]
        split = _run_split(prog, graph, {graph.data_inputs[0]: x}, cuts, [[3, 5], [8], [2, 1, 5], [5, 3]])
    _assert_outputs_equal(prog, whole, split)
    # the rows of each slice equal the rows of a one-image run (Reshape constants rewritten to 1 again)
    with torch.no_grad():
        one = prog(x[4:5])
    torch.testing.assert_close(whole[prog.outputs[0]][4:5], one, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,row_maps", [("bert_tiny", [[2, 3], [5], [1, 4]]), ("gpt2_tiny", [[4, 1], [3, 2], [5]])])
def test_text_models_groups_follow_rows(name, row_maps):
    torch.set_num_threads(1)
    path = os.path.join(MODELS, f"{name}.onnx")
    graph = load_model(path)
    prog = TorchProgram(onnx.load(path), graph, seed=3)
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, 2048, size=(5, 32)))
    feeds = {graph.data_inputs[0]: ids}
    with torch.no_grad():
        whole = prog.run_ops(range(len(prog.nodes)), feeds, 5)
        n = len(prog.nodes)
        split = _run_split(prog, graph, feeds, [0, n // 3, 2 * n // 3 + 1, n], row_maps)
    _assert_outputs_equal(prog, whole, split)


def test_rewrite_batch_constant_by_hand():
    value = torch.tensor([4, 4, 28, 56, 56])
    assert rewrite_batch_constant(value, 0, 4, 3).tolist() == [3, 4, 28, 56, 56]
    assert rewrite_batch_constant(torch.tensor([8, 2048]), 0, 4, 5).tolist() == [10, 2048]  # 2 per file row
    assert value.tolist() == [4, 4, 28, 56, 56]  # the stored constant is left alone


def test_batch_constant_rewritten_per_call(tmp_path):
    """A hand-built Reshape to [1, 12] (batch baked in): runs on 3 rows and then on 5 rows."""
    from onnx import TensorProto, helper

    from tag.graph.opgraph import BatchConstant

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])
    shape = helper.make_tensor("target", TensorProto.INT64, [2], [1, 12])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "target"], ["r"], name="flat"),
                           helper.make_node("Relu", ["r"], ["y"], name="relu")], "g", [x], [y], [shape])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    prog = TorchProgram(model, batch_constants=[BatchConstant("target", 0, 1)])
    for rows in (3, 5, 3):
        xs = torch.randn(rows, 3, 4)
        out = prog.run_ops([0, 1], {"x": xs}, rows)["y"]
        torch.testing.assert_close(out, torch.relu(xs.reshape(rows, 12)))

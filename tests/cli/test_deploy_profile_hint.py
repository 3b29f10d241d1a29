"""`tag deploy` of a plan made without a profile prints, under its measured step, the commands for a prediction of
this machine, with the data-input shapes the plan records; the printed `tag profile ops` command runs as written."""

from __future__ import annotations

import os
import shlex

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tag.cli import main

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TOPO = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")


def _symbolic_model(path: str) -> None:
    """x [N, S] (S symbolic) @ w [8, 4] -> y [N, 4]."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_the_hint_names_the_recorded_shapes_and_its_command_runs(tmp_path, capsys):
    model, plan = str(tmp_path / "m.onnx"), str(tmp_path / "plan.json")
    _symbolic_model(model)
    assert main(["plan", model, TOPO, "--baseline", "dp-even", "--batch-size", "8", "--input-shape", "x=1x8",
                 "-o", plan]) == 0
    capsys.readouterr()
    assert main(["deploy", plan, model, "--nproc", "1", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    hint = [ln for ln in out.splitlines() if "the plan has no profile" in ln]
    assert len(hint) == 1 and f"tag profile ops {model} --input-shape x=1x8 -o profile.json" in hint[0]
    command = hint[0].split("for one of this machine: ")[1].split(", then")[0]
    argv = shlex.split(command)[1:]
    argv[argv.index("-o") + 1] = str(tmp_path / "profile.json")
    assert main(argv + ["--rows", "1,2", "--repeats", "1", "--warmup", "0", "--quick"]) == 0
    assert os.path.getsize(tmp_path / "profile.json") > 0

"""`tag deploy` of a plan made without a profile prints, under its measured step, the commands for a prediction of
this machine, with the data-input shapes the plan records; the printed `tag profile ops` command runs as written."""

from __future__ import annotations

import os
import shlex

import numpy as np
import onnx
import pytest
import torch
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


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the plan's GPUs run it")
def test_a_gpu_plan_on_cpu_ranks_says_so_instead(tmp_path, capsys):
    """A plan for two V100s run here (no CUDA: gloo CPU ranks): one line says the measured step is this machine's
    and the prediction the GPUs'; no profile hint (a profile of this CPU would not predict the GPUs)."""
    model, plan, topo = str(tmp_path / "m.onnx"), str(tmp_path / "plan.json"), tmp_path / "v100.json"
    _symbolic_model(model)
    topo.write_text('{"version": 1, "name": "v", "machines": [{"name": "m0", "devices": [{"type": "V100-16GB", '
                    '"count": 2}], "nic_bandwidth_gbps": 10}]}')
    assert main(["plan", model, str(topo), "--baseline", "dp-even", "--batch-size", "8", "--input-shape", "x=1x8",
                 "-o", plan]) == 0
    capsys.readouterr()
    assert main(["deploy", plan, model, "--nproc", "1", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    note = [ln for ln in out.splitlines() if "the plan's devices are GPUs" in ln]
    assert len(note) == 1 and "prediction is for the plan's GPUs" in note[0]
    assert "the plan has no profile" not in out

"""Float buffers marked as constants (`tag.graph.roles.mark_constants`, metadata ``tag.constants``): not parameters
for the planner (param_names, param counts) nor for deploy's program (not trained), while the unmarked export
trains them. Checked against torch: a module with an additive float mask buffer, exported, trains in tag's program
exactly as the module does (gradients by parameter name) only once the buffer is marked."""

from __future__ import annotations

import json

import onnx
import pytest
import torch

from tag.cli import main
from tag.deploy.onnx_torch import TorchProgram
from tag.graph import load_model
from tag.graph.roles import CONSTANTS_KEY, mark_constants


class _Masked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.register_buffer("mask", -0.5 * torch.arange(6.0))  # a float buffer added to the logits

    def forward(self, x):
        return torch.softmax(self.lin(x) + self.mask, dim=-1)


@pytest.fixture()
def exported(tmp_path):
    torch.manual_seed(0)
    module = _Masked().eval()
    path = str(tmp_path / "m.onnx")
    torch.onnx.export(module, (torch.zeros(2, 6),), path, input_names=["x"], output_names=["y"],
                      dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False, optimize=False)
    return module, path


def test_marked_buffer_is_a_constant_and_training_matches_torch(exported):
    module, path = exported
    assert "mask" in load_model(path, batch_size=4).param_names  # unmarked: trained like a weight
    names = mark_constants(path, [n for n, b in module.named_buffers() if b.is_floating_point()] + ["folded_away"])
    assert names == ["mask"]
    assert json.loads({p.key: p.value for p in onnx.load(path).metadata_props}[CONSTANTS_KEY]) == ["mask"]
    graph = load_model(path, batch_size=4)
    assert sorted(graph.param_names) == sorted(n for n, _ in module.named_parameters())
    assert graph.param_count == sum(p.numel() for p in module.parameters())
    prog = TorchProgram(onnx.load(path), graph)
    assert sorted(prog.param_names) == sorted(n for n, _ in module.named_parameters())
    assert sorted(TorchProgram(onnx.load(path)).param_names) == sorted(prog.param_names)  # without an OpGraph too
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    target = torch.randn(4, 6, generator=torch.Generator().manual_seed(2))
    ((module(x) - target) ** 2).sum().backward()
    ((prog(x) - target) ** 2).sum().backward()
    for name, p in module.named_parameters():
        torch.testing.assert_close(prog.param(name).grad, p.grad, rtol=1e-5, atol=1e-7)


def test_a_bad_constants_entry_is_one_line(exported, tmp_path, capsys):
    _, path = exported
    model = onnx.load(path)
    model.metadata_props.add(key=CONSTANTS_KEY, value=json.dumps(["no_such_tensor"]))
    bad = str(tmp_path / "bad.onnx")
    onnx.save(model, bad)
    capsys.readouterr()
    assert main(["inspect", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metadata_props['tag.constants']" in err and "'no_such_tensor'" in err

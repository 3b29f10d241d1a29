"""The recurrent converters (tag/deploy/onnx_torch/ops_rnn.py) against two independent implementations:
onnx's reference evaluator on hand-built LSTM / GRU / RNN nodes (every direction, both layouts, LSTM peepholes,
GRU's linear_before_reset, initial states), and torch's own nn.LSTM / nn.GRU exported by torch.onnx (outputs and
every parameter's gradient, by the module's parameter names). `clip` (which onnx's reference ignores) by hand."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tag.deploy.onnx_torch import TorchProgram

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
I_SIZE, H, T, B = 5, 4, 6, 3


def _node_model(op, direction, layout, peepholes=False, linear_before_reset=None, clip=None, seed=0):
    """One `op` node: X the data input, W, R, B, initial_h (and initial_c, P) as initializers."""
    rng = np.random.default_rng(seed)
    d, g = (2 if direction == "bidirectional" else 1), GATES[op]

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)

    state = (d, B, H) if layout == 0 else (B, d, H)
    inits = [init("W", d, g * H, I_SIZE), init("R", d, g * H, H), init("Bias", d, 2 * g * H), init("h0", *state)]
    inputs = ["X", "W", "R", "Bias", "", "h0"]
    if op == "LSTM":
        inits.append(init("c0", *state))
        inputs.append("c0")
        if peepholes:
            inits.append(init("P", d, 3 * H))
            inputs.append("P")
    attrs = {"hidden_size": H, "direction": direction, "layout": layout}
    if linear_before_reset is not None:
        attrs["linear_before_reset"] = linear_before_reset
    if clip is not None:
        attrs["clip"] = clip
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    x_shape = [T, B, I_SIZE] if layout == 0 else [B, T, I_SIZE]
    graph = helper.make_graph([helper.make_node(op, inputs, outputs, **attrs)], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, rng.standard_normal(x_shape).astype(np.float32)


CASES = [(op, direction, layout, extra)
         for op in GATES for direction in ("forward", "reverse", "bidirectional") for layout in (0, 1)
         for extra in ({}, {"peepholes": True} if op == "LSTM" else {"linear_before_reset": 1} if op == "GRU" else {})]


@pytest.mark.parametrize("op, direction, layout, extra", CASES)
def test_nodes_match_onnx_reference(op, direction, layout, extra):
    model, x = _node_model(op, direction, layout, **extra)
    want = ReferenceEvaluator(model).run(None, {"X": x})
    got = TorchProgram(model)(torch.from_numpy(x))
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert tuple(g.shape) == w.shape
        np.testing.assert_allclose(g.detach().numpy(), w, rtol=1e-5, atol=1e-6)


def test_clip_bounds_every_pre_activation_by_hand():
    """RNN, one step, clip 0.3: Y = tanh(clip(x W' + h0 R' + Wb + Rb, -0.3, 0.3)), worked in plain Python."""
    model, x = _node_model("RNN", "forward", 0, clip=0.3)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    x = x[:1]
    vals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w, r, b, h0 = vals["W"][0], vals["R"][0], vals["Bias"][0], vals["h0"][0]
    got = TorchProgram(model)(torch.from_numpy(x))[0].detach().numpy()[0, 0]  # [B, H]
    for row in range(B):
        for j in range(H):
            pre = sum(float(x[0, row, k]) * float(w[j, k]) for k in range(I_SIZE))
            pre += sum(float(h0[row, k]) * float(r[j, k]) for k in range(H)) + float(b[j]) + float(b[H + j])
            assert got[row, j] == pytest.approx(math.tanh(min(max(pre, -0.3), 0.3)), abs=1e-6)


class _Net(torch.nn.Module):
    def __init__(self, cell: str):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.rnn = getattr(torch.nn, cell)(8, 6, batch_first=True, bidirectional=cell == "GRU")
        self.out = torch.nn.Linear(12 if cell == "GRU" else 6, 3)

    def forward(self, ids):
        y, _ = self.rnn(self.emb(ids))
        return self.out(y[:, -1])


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_torch_modules_exported_train_the_same(cell, tmp_path):
    """nn.LSTM (forward) and nn.GRU (bidirectional) exported by torch.onnx: the program's outputs equal the module's,
    and so does every parameter's gradient of the same loss, matched by the module's parameter names."""
    torch.manual_seed(0)
    net = _Net(cell).eval()
    path = str(tmp_path / "m.onnx")
    torch.onnx.export(net, (torch.zeros(2, 7, dtype=torch.int64),), path, input_names=["ids"], output_names=["y"],
                      dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False, optimize=False)
    assert any(n.op_type == cell for n in onnx.load(path).graph.node)
    prog = TorchProgram(onnx.load(path))
    ids = torch.randint(0, 50, (5, 7), generator=torch.Generator().manual_seed(1))
    target = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    ref = net(ids)
    got = prog(ids)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    ((ref - target) ** 2).mean().backward()
    ((got - target) ** 2).mean().backward()
    for name, p in net.named_parameters():
        torch.testing.assert_close(prog.param(name).grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_lstm_trains_on_two_ranks_like_one_process(tmp_path):
    """The exported nn.LSTM net on 2 gloo ranks (one launch): rows 5:1 of the batch (Y split on its batch axis 2 of
    [T, D, B, H]), and the ops cut in two groups after the LSTM on different ranks (Y crosses between them); losses
    and parameters equal plain full-batch training (`_deploy_harness.reference_training`)."""
    from _deploy_harness import assert_ranks_match_reference, reference_training, run_scenarios

    from tag.deploy.data import synthetic_batch
    from tag.strategy import Decision, Strategy

    torch.manual_seed(0)
    path = str(tmp_path / "lstm.onnx")
    torch.onnx.export(_Net("LSTM").eval(), (torch.zeros(2, 7, dtype=torch.int64),), path, input_names=["ids"],
                      output_names=["y"], dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False,
                      optimize=False)
    plans = {"uneven": (1, Strategy((Decision((5, 1), "ring", None, ()),))),
             "two-groups": (2, Strategy((Decision((6, 0)), Decision((0, 6))))),}
    scenarios = [{"name": n, "path": path, "groups": k, "strategy": s, "machines": ["m0", "m0"], "steps": 3,
                  "optimizer": "momentum", "lr": 0.05} for n, (k, s) in plans.items()]
    results = run_scenarios(2, scenarios, _make_lstm, str(tmp_path))
    graph, program, _ = _make_lstm({"path": path, "groups": 1})
    data, targets = synthetic_batch(graph, LSTM_BATCH, 0)
    ref_losses, ref_params = reference_training(graph, program, data, targets, 3, "momentum", 0.05)
    assert ref_losses[-1] < ref_losses[0]
    for sc in scenarios:
        assert_ranks_match_reference(results[sc["name"]], ref_losses, ref_params, sc["name"])


LSTM_BATCH = 6


def _make_lstm(sc):
    """(graph, program, groups) of the exported LSTM net at LSTM_BATCH rows: one group, or two cut after the LSTM."""
    from tag.graph import load_model

    graph = load_model(sc["path"], batch_size=LSTM_BATCH)
    cut = 1 + next(i for i, op in enumerate(graph.ops) if op.op_type == "LSTM")
    n = len(graph.ops)
    groups = [list(range(n))] if sc["groups"] == 1 else [list(range(cut)), list(range(cut, n))]
    return graph, TorchProgram(onnx.load(sc["path"]), graph, seed=0), groups


class _GRULM(torch.nn.Module):
    """A 2-layer GRU language model: the exporter reorders each layer's gate blocks with Slice / Concat ops that
    coarsening puts in other groups than the GRU itself, so parameters are read by several groups."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(40, 16)
        self.rnn = torch.nn.GRU(16, 24, batch_first=True, num_layers=2)
        self.head = torch.nn.Linear(24, 40)

    def forward(self, ids):
        return self.head(self.rnn(self.emb(ids))[0])


def test_a_plan_of_parameters_read_by_several_groups_deploys(tmp_path, capsys):
    """The plan's gradient buckets and deploy's own accounting agree on which groups sync which parameters: a
    parameter read by several groups syncs once over their union, every other one with the one group reading it.
    (The simulator once took a group's own bytes as its param_bytes less the shared parameters it owns, but a
    shared parameter's bytes sit in the group of its first reader in op order, not always the lowest group id: the
    plan then lacked a bucket deploy requires, and `tag deploy` refused the plan `tag plan` wrote.)"""
    from tag.cli import main
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.sim.buckets import own_sync_bytes
    from tag.sim.gradsync import shared_params
    from tag.strategy import Decision

    torch.manual_seed(0)
    path, plan = str(tmp_path / "grulm.onnx"), str(tmp_path / "plan.json")
    torch.onnx.export(_GRULM().eval(), (torch.zeros(2, 10, dtype=torch.int64),), path, input_names=["ids"],
                      output_names=["logits"], dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False,
                      optimize=False)
    gg = coarsen(load_model(path, batch_size=8, n_devices=4), n_devices=4)
    shared = shared_params(gg)
    assert shared  # the premise: some parameter is read by two groups
    own = own_sync_bytes(gg, tuple(Decision((2, 2, 2, 2), "ring") for _ in gg.groups))
    for g in gg.groups:  # by a walk of the groups' ops: bytes of parameters no other group reads
        mine = {p for i in g.op_ids for p in gg.graph.ops[i].params} - set(shared)
        assert own[g.id] == sum(gg.graph.tensors[p].numel * 4 for p in mine)
    topo = str(os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "topologies", "cpu4.json"))
    assert main(["plan", path, topo, "--baseline", "dp-even", "--batch-size", "8", "-o", plan]) == 0
    capsys.readouterr()
    assert main(["deploy", plan, path, "--nproc", "2", "--steps", "2", "--json"]) == 0
    out = capsys.readouterr().out
    assert all(math.isfinite(v) for v in json.loads(out)["losses"])

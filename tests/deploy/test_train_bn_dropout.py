"""Must show 3: a CNN exported in training mode (BatchNormalization training_mode=1, Dropout 0.25) trains like one
device on the whole batch under dp-even rows, uneven rows, BatchNormalization's group alone on one device
and a two-stage placement; BatchNormalization split over ranks uses the global batch's statistics (summed over
the replicas, SyncBatchNorm semantics) and updates its running statistics as ONNX says. One launch of 3 ranks.

The converter checks (no ranks): training-mode BatchNormalization against torch's F.batch_norm and the ONNX
running-statistics formula worked by hand (population variance); Dropout masks cut from the global batch's mask.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

from _deploy_harness import run_scenarios
from tag.deploy.onnx_torch.ops_nn import TrainingContext, training_context
from tag.deploy.onnx_torch.registry import NodeSpec
from tag.strategy import Decision, Strategy

B, STEPS, SEED, LR = 16, 4, 7, 0.01
MACHINES = ["m0", "m0", "m1"]


def _export(path: str) -> None:
    torch.manual_seed(0)
    # no conv bias: BatchNormalization removes it, its gradient is rounding noise that Adam would amplify
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                            torch.nn.Dropout(0.25), torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.zeros(2, 1, 8, 8),), path, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, dynamo=False, opset_version=17)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    path = str(tmp_path_factory.mktemp("bn") / "cnn_bn.onnx")
    _export(path)
    graph = load_model(path, batch_size=B)
    groups = [list(g.op_ids) for g in coarsen(graph, k=4, n_devices=3).groups]
    bn = next(i for i, g in enumerate(groups) if any(graph.ops[o].op_type == "BatchNormalization" for o in g))
    return path, graph, groups, bn


def _program(path, graph):
    from tag.deploy.onnx_torch import TorchProgram

    return TorchProgram(onnx.load(path), graph, seed=0)


def _make(sc):
    path, graph, groups = sc["model"]
    return graph, _program(path, graph), groups


def _strategy(graph, groups, rows_of):
    decs = []
    for g, ops in enumerate(groups):
        rows = rows_of(g)
        has_params = any(t in graph.param_names for o in ops for t in graph.ops[o].inputs)
        decs.append(Decision(tuple(rows), "ring" if has_params and sum(r > 0 for r in rows) > 1 else None, None, ()))
    return Strategy(tuple(decs))


def _reference(path, graph):
    """One process, the whole batch, plain torch.optim; step s runs under the masks of (SEED, s)."""
    from tag.deploy.data import synthetic_batch

    prog = _program(path, graph)
    data, targets = synthetic_batch(graph, B, SEED)
    opt = torch.optim.Adam([prog.param(n) for n in prog.param_names], lr=LR)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        with training_context(TrainingContext(seed=SEED, step=s)):
            env = prog.run_ops(list(range(len(graph.ops))), dict(data), B)
        loss = sum(F.mse_loss(env[t], targets[t]) for t in targets)
        loss.backward()
        losses.append(float(loss.detach()))
        opt.step()
    return losses, {n: prog.param(n).detach().clone() for n in prog.param_names}


def test_cnn_with_batchnorm_and_dropout_trains_like_one_device(cnn, tmp_path):
    path, graph, groups, bn = cnn
    n = len(groups)
    plans = {
        "dp_even": lambda g: (6, 5, 5),  # BatchNormalization split too: statistics summed over 3 ranks
        "uneven": lambda g: (9, 2, 5),
        "bn_alone": lambda g: (16, 0, 0) if g == bn else (9, 2, 5),  # BN's group on one device, the rest uneven
        "two_stage": lambda g: (16, 0, 0) if g <= bn else (0, 10, 6),  # stage 1 on rank 0, stage 2 on ranks 1-2
    }
    assert 0 < bn < n - 1
    scenarios = [{"name": k, "strategy": _strategy(graph, groups, f), "machines": MACHINES, "steps": STEPS,
                  "seed": SEED, "optimizer": "adam", "lr": LR, "model": (path, graph, groups)} for k, f in plans.items()]
    res = run_scenarios(3, scenarios, _make, str(tmp_path))
    ref_losses, ref_params = _reference(path, graph)
    assert ref_losses[0] != pytest.approx(ref_losses[1], abs=1e-3)  # it trains
    running = [k for k in ref_params if "running" in k]
    assert running and not torch.allclose(ref_params[running[0]], torch.zeros_like(ref_params[running[0]]))
    for name, ranks in res.items():
        for r in ranks:
            assert np.allclose(r["losses"], ref_losses, rtol=0, atol=1e-5), name
            for p, value in r["params"].items():
                assert torch.allclose(value, ref_params[p], atol=1e-5), (name, p)


def test_training_mode_batchnorm_is_splittable_by_rows(cnn):
    """Its statistics are summed over the replicas (above), so the planner may split it like any row-wise op."""
    _, graph, _, _ = cnn
    bns = [op for op in graph.ops if op.op_type == "BatchNormalization"]
    assert bns and all(op.attrs.get("training_mode") for op in bns)
    assert all(op.batched and op.splittable for op in bns)


def _node(op, attrs, n_out=1, index=3):
    return NodeSpec(index, op, op, "", [f"in{i}" for i in range(5)], [f"out{i}" for i in range(n_out)], attrs, 17)


def test_batchnorm_training_matches_torch_and_the_onnx_running_update():
    from tag.deploy.onnx_torch.ops_nn import _batchnorm

    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, 4, 4, generator=g) * 2 + 1
    scale, bias = torch.rand(3, generator=g) + 0.5, torch.randn(3, generator=g)
    rm, rv = torch.zeros(3), torch.ones(3)
    y, m_out, v_out = _batchnorm(_node("BatchNormalization", {"training_mode": 1, "momentum": 0.9, "epsilon": 1e-5}, 3),
                                 [x, scale, bias, rm, rv])
    assert torch.allclose(y, F.batch_norm(x, None, None, scale, bias, training=True, eps=1e-5), atol=1e-5)
    xs = x.permute(1, 0, 2, 3).reshape(3, -1).double()
    mean = xs.mean(1)
    pop_var = ((xs - mean[:, None]) ** 2).sum(1) / xs.shape[1]  # ONNX: population variance
    assert torch.allclose(rm.double(), 0.1 * mean, atol=1e-6) and torch.allclose(m_out.double(), 0.1 * mean, atol=1e-6)
    assert torch.allclose(rv.double(), 0.9 + 0.1 * pop_var, atol=1e-6) and torch.equal(v_out, rv)


def test_dropout_masks_are_the_global_batchs_cut_by_rows():
    from tag.deploy.onnx_torch.ops_nn import _dropout

    x = torch.ones(10, 50)
    ratio, training = torch.tensor(0.25), torch.tensor(True)
    node = _node("Dropout", {}, 2)
    with training_context(TrainingContext(seed=3, step=2)):
        full, mask = _dropout(node, [x, ratio, training])
    assert torch.equal(full, mask.float() * torch.tensor(1 / 0.75)) and mask.dtype == torch.bool
    assert 0.15 < 1 - mask.float().mean().item() < 0.35
    pieces = []
    for off, rows in ((0, 4), (4, 1), (5, 5)):
        with training_context(TrainingContext(seed=3, step=2, row_offset=off, global_rows=10)):
            pieces.append(_dropout(node, [x[off:off + rows], ratio, training])[0])
    assert torch.equal(torch.cat(pieces), full)
    with training_context(TrainingContext(seed=3, step=3)):
        assert not torch.equal(_dropout(node, [x, ratio, training])[0], full)  # a new mask every step
    assert torch.equal(_dropout(node, [x, ratio, torch.tensor(False)])[0], x)  # inference: identity

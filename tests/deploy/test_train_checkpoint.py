"""Must show 4: a run stopped at step 5 (mid-epoch) and resumed to step 10 from its --checkpoint gives the losses
of an uninterrupted run, here an independent single-process full-batch loop on the same data order; the
checkpoint's state file loads weights-only; --export .onnx writes the trained model. Two torchrun launches of
2 ranks (4 plan devices in blocks of 2)."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

from tag.cli import main

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")  # x [B, 512] -> [B, 512]
TOPO = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")
B, N, SEED, LR = 16, 40, 3, 0.002  # 40 rows: 2 steps per epoch, the last 8 rows of every epoch dropped

DATA = '''
import numpy as np

def regression():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((40, 512)).astype(np.float32)
    return x, np.tanh(x[:, ::-1]).copy()
'''


def _reference(steps: int):
    """Plain loop: TorchProgram on the whole global batch, rows in the documented order, mean squared error."""
    from tag.deploy.onnx_torch import TorchProgram

    rng = np.random.default_rng(11)
    x = torch.from_numpy(rng.standard_normal((N, 512)).astype(np.float32))
    y = torch.tanh(x.flip(1))
    prog = TorchProgram(onnx.load(MODEL))
    opt = torch.optim.Adam(prog.parameters(), lr=LR)
    losses = []
    for s in range(steps):
        epoch, k = divmod(s, N // B)
        idx = torch.from_numpy(np.random.default_rng([SEED, epoch]).permutation(N)[k * B:(k + 1) * B])
        opt.zero_grad()
        loss = F.mse_loss(prog(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, prog, x


def test_resume_gives_the_uninterrupted_losses(tmp_path, capsys):
    (tmp_path / "reg.py").write_text(DATA)
    plan, folder, out_onnx = str(tmp_path / "plan.json"), str(tmp_path / "ck"), str(tmp_path / "trained.onnx")
    assert main(["plan", MODEL, TOPO, "--baseline", "dp-even", "--batch-size", str(B), "-o", plan]) == 0
    raw = json.load(open(plan))
    for d in raw["decisions"]:  # uneven rows 9 / 2 / 1 / 4 over the four devices: ranks of 11 and 5 rows
        d["rows"] = dict(zip(sorted(d["rows"]), (9, 2, 1, 4)))
    json.dump(raw, open(plan, "w"))
    common = ["deploy", plan, MODEL, "--data", str(tmp_path / "reg.py") + ":regression", "--loss", "mse",
              "--lr", str(LR), "--seed", str(SEED), "--nproc", "2", "--checkpoint", folder, "--json"]
    capsys.readouterr()
    assert main(common + ["--steps", "5"]) == 0
    first = json.loads(capsys.readouterr().out)
    meta = json.load(open(os.path.join(folder, "checkpoint.json")))
    assert meta["step"] == 5 and sorted(os.listdir(folder)) == ["checkpoint.json", "state-5.pt"]
    state = torch.load(os.path.join(folder, meta["state"]), weights_only=True)
    onnx_names = sorted(t.name for t in onnx.load(MODEL).graph.initializer)
    assert sorted(state["weights"]) == onnx_names and sorted(state["optimizer"]) == onnx_names
    assert main(common + ["--steps", "10", "--export", out_onnx]) == 0
    second = json.loads(capsys.readouterr().out)
    ref, prog, x = _reference(10)
    assert (first["first_step"], len(first["losses"]), second["first_step"], len(second["losses"])) == (0, 5, 5, 5)
    assert np.allclose(first["losses"] + second["losses"], ref, rtol=0, atol=1e-5)
    # epochs touched: run 1 ends mid-epoch 2 (1 of its 2 steps), run 2 finishes it
    assert [(e["epoch"], e["steps"]) for e in first["epochs"]] == [(0, 2), (1, 2), (2, 1)]
    assert [(e["epoch"], e["steps"]) for e in second["epochs"]] == [(2, 1), (3, 2), (4, 2)]
    from tag.deploy.onnx_torch import TorchProgram

    with torch.no_grad():
        assert torch.allclose(TorchProgram(onnx.load(out_onnx))(x[:4]), prog(x[:4]), atol=1e-4)
    assert json.load(open(os.path.join(folder, "checkpoint.json")))["step"] == 10

"""Must show 1: scikit-learn's digits trained by an uneven 3-rank plan (32/16/16 rows on a V100 and two T4s) in one
torchrun launch, against plain single-process PyTorch training of the same module: every step's loss equal to
1e-4 over 220 steps (10 epochs), and the same test accuracy, >= 95%, from the exported state_dict."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("sklearn")

from tag.cli import main  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "digits")
sys.path.insert(0, EXAMPLE)

import digits  # noqa: E402
from make_model import export, mlp  # noqa: E402

B, EPOCHS, LR, SEED = 64, 10, 0.01, 0


def _reference():
    """Single process, plain torch: the documented order (default_rng([seed, epoch]) permutation, drop_last),
    mean cross entropy over the global batch, Adam."""
    x, y = (torch.from_numpy(a) for a in digits.train_set())
    model = mlp(0)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for epoch in range(EPOCHS):
        perm = np.random.default_rng([SEED, epoch]).permutation(len(y))
        for k in range(len(y) // B):
            idx = torch.from_numpy(perm[k * B:(k + 1) * B])
            opt.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            losses.append(float(loss))
    return losses, model


def _accuracy(model) -> float:
    x, y = (torch.from_numpy(a) for a in digits.test_set())
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def test_uneven_three_rank_plan_trains_digits_like_one_process(tmp_path, capsys):
    onnx_path, plan, weights = str(tmp_path / "digits_mlp.onnx"), str(tmp_path / "plan.json"), str(tmp_path / "w.pt")
    export(onnx_path, 0)
    assert main(["plan", onnx_path, os.path.join(EXAMPLE, "mixed3.json"), "--baseline", "dp-proportional",
                 "--batch-size", str(B), "-o", plan]) == 0
    rows = [sorted(d["rows"].values()) for d in json.load(open(plan))["decisions"]]
    assert all(r == [16, 16, 32] for r in rows)  # uneven: proportional to 15.7 : 8.1 : 8.1 TFLOPS
    capsys.readouterr()
    assert main(["deploy", plan, onnx_path, "--data", os.path.join(EXAMPLE, "digits.py") + ":train_set",
                 "--loss", "cross_entropy", "--epochs", str(EPOCHS), "--lr", str(LR), "--seed", str(SEED),
                 "--export", weights, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ref_losses, ref_model = _reference()
    assert out["nproc"] == 3 and out["steps"] == len(ref_losses) == EPOCHS * (1437 // B) == 220
    assert np.allclose(out["losses"], ref_losses, rtol=0, atol=1e-4)
    assert [e["steps"] for e in out["epochs"]] == [22] * EPOCHS
    # per-epoch loss = mean of its step losses; accuracy is the training rows' (a fraction)
    assert out["epochs"][-1]["loss"] == pytest.approx(np.mean(ref_losses[-22:]), abs=1e-4)
    assert 0.9 < out["epochs"][-1]["accuracy"] <= 1.0
    trained = mlp(1)  # other initial values: everything must come from the file
    trained.load_state_dict(torch.load(weights, weights_only=True))
    acc, ref_acc = _accuracy(trained), _accuracy(ref_model)
    assert ref_acc >= 0.95 and acc == pytest.approx(ref_acc, abs=1 / 360 + 1e-9)

"""A user's own sequence model on its own data: examples/charlm (a small causal transformer, ids [rows, 32] ->
logits [rows, 32, 128], next-character labels [rows, 32]) deployed by `tag deploy --loss cross_entropy` under a
2-stage 1F1B pipeline whose second stage has two uneven replicas, on 3 ranks, against plain single-process torch
training of the same module on the documented batch order with F.cross_entropy over every position. Also: a
sequence model's labels of the wrong shape are one exit-2 line before any rank starts."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("sklearn")

from tag.cli import main  # noqa: E402
from tag.strategy import Decision, Strategy, TrainingConfig  # noqa: E402
from tag.strategy.pipeline import Pipeline, Stage  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "charlm")
B, M, STEPS, LR = 32, 4, 4, 0.05
TOPO = {"version": 1, "name": "cpu4", "machines": [
    {"name": "m0", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10},
    {"name": "m1", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10}]}


def _example(name: str):
    """examples/charlm/<name>.py as a module of its own (examples/digits has a make_model.py too)."""
    sys.path.insert(0, EXAMPLE)  # make_model imports charlm
    spec = importlib.util.spec_from_file_location(f"charlm_example_{name}", os.path.join(EXAMPLE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("charlm")
    model, topo, dp = str(d / "charlm.onnx"), d / "cpu4.json", str(d / "dp.json")
    _example("make_model").export(model, 0)
    topo.write_text(json.dumps(TOPO))
    assert main(["plan", model, str(topo), "--baseline", "dp-even", "--batch-size", str(B), "-o", dp, "--json"]) == 0
    return d, model, str(topo), dp


def _pipelined_plan(d, model, topo, dp) -> str:
    """The first half of the groups on device 0, the second on devices 2 and 3 with 2:6 rows of each 8-row
    micro-batch (tree sync), 1F1B, m = 4; momentum (Adam would amplify the round-off of gradients that are exactly
    zero in one order of additions: the attention's key bias)."""
    from tag.modelio import ModelOptions, load_inputs
    from tag.strategy.planfile import write_plan

    inp = load_inputs(model, topo, ModelOptions(batch_size=B), plan_path=dp)
    n, cut = inp.gg.n_groups, inp.gg.n_groups // 2
    first, second = (B, 0, 0, 0), (0, 0, B // 4, 3 * B // 4)
    decs = [Decision(first) if g < cut else Decision(second, "tree" if dec.sync is not None else None)
            for g, dec in enumerate(inp.strategy.decisions)]
    stages = (Stage(tuple(range(cut)), (0,)), Stage(tuple(range(cut, n)), (2, 3)))
    path = str(d / "pipe.json")
    write_plan(path, Strategy(tuple(decs), 25.0, pipeline=Pipeline(stages, M, "1f1b")), inp.gg, inp.cluster,
               TrainingConfig("momentum", LR, "cross_entropy"), model, topo)
    return path


def _reference(labels=lambda y: y):
    """Plain torch: CharLM seeded 0, epoch 0's default_rng([0, 0]) permutation, mean cross entropy over every
    counted position of the batch (torch's ignore_index=-100), SGD with momentum 0.9 (tag's `momentum`), on the
    data's labels passed through `labels`. Returns the losses, each step's fraction of counted positions right and
    the trained state."""
    data, make_model = _example("charlm"), _example("make_model")
    x, y = data.train_set()
    x, y = torch.from_numpy(x), torch.from_numpy(labels(y.copy()))
    model = make_model.charlm(0)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    perm = np.random.default_rng([0, 0]).permutation(len(y))
    losses, right = [], []
    for k in range(STEPS):
        idx = torch.from_numpy(perm[k * B:(k + 1) * B])
        opt.zero_grad()
        logits = model(x[idx])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[idx].reshape(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        keep = y[idx] != -100
        right.append(float(((logits.argmax(-1) == y[idx]) & keep).sum()) / float(keep.sum()))
    return losses, right, model.state_dict()


def test_a_sequence_model_trains_under_a_pipeline_like_one_process(files, tmp_path):
    d, model, topo, dp = files
    plan, weights = _pipelined_plan(d, model, topo, dp), tmp_path / "w.pt"
    p = subprocess.run([sys.executable, "-m", "tag.cli", "deploy", plan, model, "--steps", str(STEPS), "--nproc", "3",
                        "--data", os.path.join(EXAMPLE, "charlm.py") + ":train_set", "--export", str(weights),
                        "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["nproc"] == 3 and out["loss"] == "cross_entropy" and out["optimizer"] == "momentum"
    ref_losses, ref_right, ref_state = _reference()
    assert out["losses"] == pytest.approx(ref_losses, rel=1e-4)
    assert ref_losses[-1] < ref_losses[0]
    # the epoch's accuracy: the training positions predicted right, each step's batch before its update
    assert out["epochs"][-1]["accuracy"] == pytest.approx(np.mean(ref_right), abs=1e-6)
    trained = torch.load(weights, weights_only=True)
    assert set(trained) == set(ref_state)
    for name, v in trained.items():
        torch.testing.assert_close(v, ref_state[name], rtol=1e-4, atol=1e-6, msg=name)


DATA = '''
import numpy as np

def _ids(n):
    return np.random.default_rng(0).integers(0, 128, (n, 32)).astype(np.int64)

def one_label_per_row():
    return _ids(40), np.zeros(40, dtype=np.int64)

def label_out_of_range():
    y = _ids(40)
    y[3, 5] = 128
    return _ids(40), y

def every_label_ignored():
    return _ids(40), np.full((40, 32), -100, dtype=np.int64)
'''


@pytest.mark.parametrize("fn, needle", [
    ("one_label_per_row", "dataset[0] target: expected integer class labels of shape (32,) per row (one per position "
                          "of the output (32, 128)) for cross_entropy, found shape () of torch.int64"),
    ("label_out_of_range", "labels: expected class indices in [0, 128) (the model's outputs), or -100 for a "
                           "position to ignore, found 128"),
    ("every_label_ignored", "labels: expected at least one class label that is not -100 (the ignored padding "
                            "label), found every label is -100"),
])
def test_sequence_labels_that_do_not_fit_are_one_line(files, capsys, fn, needle):
    d, model, topo, dp = files
    (d / "seqdata.py").write_text(DATA)
    capsys.readouterr()
    assert main(["deploy", dp, model, "--data", f"{d}/seqdata.py:{fn}", "--loss", "cross_entropy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert needle in err


def _mask(y):
    """-100 labels: row i's first i mod 32 positions (a prompt), and every 7th row wholly."""
    for i in range(len(y)):
        y[i, :i % 32] = -100
        if i % 7 == 0:
            y[i] = -100
    return y


MASKED = '''
import sys
sys.path.insert(0, {example!r})
from charlm import train_set


def masked():
    x, y = train_set()
    return x, _mask(y.copy())
'''


def test_ignored_labels_train_like_torch_ignore_index(files, tmp_path):
    """Labels of -100 are padding, as with F.cross_entropy(ignore_index=-100): dp-even over 4 plan devices on 2
    ranks, so each rank's rows hold a different number of counted positions, and the loss is still the mean over
    the global batch's counted positions (a per-rank mean would weight the ranks' tokens differently)."""
    d, model, topo, dp = files
    (tmp_path / "masked.py").write_text(MASKED.format(example=os.path.abspath(EXAMPLE)) + inspect.getsource(_mask))
    weights = tmp_path / "w.pt"
    p = subprocess.run([sys.executable, "-m", "tag.cli", "deploy", dp, model, "--steps", str(STEPS), "--nproc", "2",
                        "--data", f"{tmp_path}/masked.py:masked", "--loss", "cross_entropy", "--optimizer",
                        "momentum", "--lr", str(LR), "--export", str(weights), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    losses, acc, state = _reference(_mask)
    assert out["losses"] == pytest.approx(losses, rel=1e-4)
    assert out["epochs"][-1]["accuracy"] == pytest.approx(np.mean(acc), abs=1e-6)
    trained = torch.load(weights, weights_only=True)
    for name, v in trained.items():
        torch.testing.assert_close(v, state[name], rtol=1e-4, atol=1e-6, msg=name)

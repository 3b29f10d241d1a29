"""Must show 5: every bad user-training input of `tag deploy` is exit 2 with one stderr line naming the flag or
file, before any rank starts, and nothing is written or overwritten (the model, the checkpoint folder)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tag.cli import main
from tag.deploy import checkpoint as ckpt

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")  # x [B, 512] -> [B, 512]
TOPO = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")
B = 16

DATA = '''
import numpy as np

def _x(n, cols=512, dtype=np.float32):
    return np.random.default_rng(0).standard_normal((n, cols)).astype(dtype)

def good():
    return _x(40), np.arange(40, dtype=np.int64) % 512

def regression():
    return _x(40), _x(40)

def narrow():
    return _x(40, cols=10), np.zeros(40, dtype=np.int64)

def int_pixels():
    return _x(40).astype(np.int64), np.zeros(40, dtype=np.int64)

def big_label():
    y = np.zeros(40, dtype=np.int64)
    y[7] = 512
    return _x(40), y

def float_label():
    return _x(40), np.zeros(40, dtype=np.float32)

def small():
    return _x(10), np.zeros(10, dtype=np.int64)

def broken():
    raise OSError("no such archive")

not_callable = 3
'''


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("train_errors")
    (d / "mydata.py").write_text(DATA)
    plan = str(d / "plan.json")
    assert main(["plan", MODEL, TOPO, "--baseline", "dp-even", "--batch-size", str(B), "-o", plan]) == 0
    return d, plan


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _deploy(env, capsys, *flags):
    d, plan = env
    capsys.readouterr()
    rc = main(["deploy", plan, MODEL, *[str(f).replace("@", str(d) + "/") for f in flags]])
    err = capsys.readouterr().err
    return rc, err


CASES = [
    (["--data", "no_colon_here"], "--data: spec: expected module:name"),
    (["--data", "no_such_module_xyz:f"], "an importable module"),
    (["--data", "@mydata.py:missing"], "a callable named 'missing'"),
    (["--data", "@mydata.py:not_callable"], "a callable named 'not_callable'"),
    (["--data", "@nofile.py:good"], "an existing Python file"),
    (["--data", "@mydata.py:broken"], "OSError: no such archive"),
    (["--data", "@mydata.py:good", "--loss", "hinge"], "--loss: name: expected one of mse, cross_entropy"),
    (["--data", "@mydata.py:good", "--loss", "@mydata.py:not_callable"], "--loss: spec"),
    (["--data", "@mydata.py:narrow", "--loss", "cross_entropy"], "input 'x': expected shape (512,)"),
    (["--data", "@mydata.py:int_pixels", "--loss", "cross_entropy"], "of float values"),
    (["--data", "@mydata.py:big_label", "--loss", "cross_entropy"], "labels: expected class indices in [0, 512)"),
    (["--data", "@mydata.py:float_label", "--loss", "cross_entropy"], "integer class label"),
    (["--data", "@mydata.py:good", "--loss", "mse"], "target: expected shape (512,) of float values"),
    (["--data", "@mydata.py:small", "--loss", "cross_entropy"], "at least the plan's global batch of 16 rows, found 10"),
    (["--data", "@mydata.py:good", "--loss", "cross_entropy", "--epochs", 2, "--steps", 4], "either --epochs or --steps"),
    (["--loss", "cross_entropy"], "mse without --data"),
    (["--epochs", 2], "--data to count epochs of"),
    (["--export", MODEL], "a path other than the inputs"),
    (["--export", "@w.txt"], "ending in .pt, .pth or .onnx"),
]


@pytest.mark.parametrize("flags,needle", CASES, ids=[" ".join(map(str, c[0]))[-40:] for c in CASES])
def test_bad_input_is_one_line_exit_2(env, capsys, flags, needle):
    before = _digest(MODEL)
    rc, err = _deploy(env, capsys, *flags)
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert needle in err, err
    assert _digest(MODEL) == before


def _identity(plan, lr=0.001, model=MODEL):
    return ckpt.Identity(model_sha256=ckpt.file_sha256(model), plan_sha256=ckpt.file_sha256(plan), optimizer="adam",
                         lr=lr, seed=0, loss="mse", data=None, dataset_rows=None, batch_rows=B)


def _folder_state(folder) -> dict:
    return {f: _digest(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}


def test_checkpoint_folders_that_do_not_fit(env, capsys, tmp_path):
    d, plan = env
    other = tmp_path / "not_a_checkpoint"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    rc, err = _deploy(env, capsys, "--checkpoint", other)
    assert rc == 2 and "an empty folder or a tag checkpoint" in err and len(err.strip().splitlines()) == 1
    assert (other / "notes.txt").read_text() == "mine"

    bad_format = tmp_path / "bad_format"
    bad_format.mkdir()
    (bad_format / "checkpoint.json").write_text(json.dumps({"format": "something-else", "step": 3}))
    rc, err = _deploy(env, capsys, "--checkpoint", bad_format)
    assert rc == 2 and "format" in err

    weights = {"w": __import__("torch").zeros(2)}
    for name, ident, needle in (("other_lr", _identity(plan, lr=0.5), "identity.lr"),
                                ("other_plan", ckpt.Identity(**{**_identity(plan).__dict__, "plan_sha256": "0" * 64}),
                                 "identity.plan_sha256"),
                                ("other_model", ckpt.Identity(**{**_identity(plan).__dict__, "model_sha256": "1" * 64}),
                                 "identity.model_sha256")):
        folder = tmp_path / name
        ckpt.save(str(folder), ident, 3, weights, {})
        before = _folder_state(folder)
        rc, err = _deploy(env, capsys, "--checkpoint", folder, "--steps", 10)
        assert rc == 2 and needle in err and "belongs to another run" in err, err
        assert len(err.strip().splitlines()) == 1
        assert _folder_state(folder) == before

    done = tmp_path / "done"
    ckpt.save(str(done), _identity(plan), 6, weights, {})
    for steps in (6, 4):
        rc, err = _deploy(env, capsys, "--checkpoint", done, "--steps", steps)
        assert rc == 2 and "above the checkpoint's step 6" in err, err
    assert sorted(os.listdir(done)) == ["checkpoint.json", "state-6.pt"]

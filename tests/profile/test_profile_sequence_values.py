"""`tag profile ops` on a model whose op groups pass a sequence value (a list of tensors, from SplitToSequence) to
each other: the exporter's fused-QKV split in examples/charlm (as in `transformers` exports). It exited 1 with
"'list' object has no attribute 'detach'" when it timed an op whose input is a sequence."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from tag.cli import main

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "charlm")


@pytest.fixture(scope="module")
def charlm(tmp_path_factory):
    sys.path.insert(0, EXAMPLE)
    spec = importlib.util.spec_from_file_location("charlm_example_make_model_p", os.path.join(EXAMPLE, "make_model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = str(tmp_path_factory.mktemp("seq") / "charlm.onnx")
    mod.export(path, 0)
    return path


def test_ops_reading_a_sequence_are_timed_forward_and_backward(charlm, tmp_path):
    """SequenceAt's input is the list SplitToSequence made; timing it alone feeds it a list of leaves, and its
    backward reaches them (a gradient for the element it picked)."""
    out = str(tmp_path / "prof.json")
    assert main(["profile", "ops", charlm, "-o", out, "--rows", "1,2", "--repeats", "1", "--warmup", "0"]) == 0
    ops = json.load(open(out))["ops"]
    for kind in ("SplitToSequence", "SequenceAt"):
        entries = [v for k, v in ops.items() if k.startswith(kind + "|")]
        assert entries, kind
        for e in entries:
            assert e["rows"] == [1, 2] and all(t > 0 for t in e["fwd_ms"] + e["bwd_ms"]), (kind, e)

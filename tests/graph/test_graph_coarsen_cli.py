"""`tag inspect MODEL --groups K` shows the coarsened groups (in-process CLI calls)."""

from __future__ import annotations

import json
import os

import onnx

from tag.cli import main

SQUEEZENET = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_squeezenet.onnx")


def test_inspect_groups_json(capsys):
    assert main(["inspect", SQUEEZENET, "--groups", "5", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["groups"] == 5 and [g["id"] for g in d["group_details"]] == [0, 1, 2, 3, 4]
    names = [n for g in d["group_details"] for n in g["ops"]]
    assert len(names) == d["ops"] == len(set(names))
    assert all(p < g["id"] for g in d["group_details"] for p in g["preds"])


def test_inspect_groups_table(capsys):
    assert main(["inspect", SQUEEZENET, "--groups", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 op groups" in out and "fwd GFLOP/row" in out


def test_inspect_bad_group_count(capsys):
    assert main(["inspect", SQUEEZENET, "--groups", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--groups" in err[0] and "positive integer" in err[0]

"""`tag plan --no-shard` and plan.json search.shards (issue 22): the flag switches shard candidates off, the key
records whether they were searched, and a sharded plan reads back and simulates to its prediction."""

import json

import pytest

from tag.cli import main

MODEL, TOPO = "datasets/models/mlp.onnx", "datasets/topologies/heterog8.json"


def _plan(tmp_path, capsys, *flags):
    out = tmp_path / "p.json"
    code = main(["plan", MODEL, TOPO, "--no-gnn", "--playouts", "10", "--simulations", "60", *flags,
                 "-o", str(out), "--json"])
    capsys.readouterr()
    assert code == 0
    return out, json.loads(out.read_text())


def test_no_shard_switches_shards_off(tmp_path, capsys):
    _, obj = _plan(tmp_path, capsys, "--no-shard")
    assert obj["search"]["shards"] is False
    assert not any("shard" in d for d in obj["decisions"])


def test_shards_are_searched_and_a_sharded_plan_simulates_as_predicted(tmp_path, capsys):
    path, obj = _plan(tmp_path, capsys)
    assert obj["search"]["shards"] is True
    code = main(["simulate", MODEL, TOPO, "--plan", str(path), "--json"])
    sim = json.loads(capsys.readouterr().out)
    assert code == 0
    assert sim["iteration_ms"] == pytest.approx(obj["predicted"]["iteration_ms"], abs=1e-4)  # written to 4 places
    # the shard search never makes the plan slower than the best without it (shard candidates only add options;
    # the same counts and seed)
    _, plain = _plan(tmp_path, capsys, "--no-shard")
    assert obj["predicted"]["iteration_ms"] <= plain["predicted"]["iteration_ms"] * (1 + 1e-9)

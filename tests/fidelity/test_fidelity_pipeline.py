"""benchmarks/fidelity.py pipelined plans: the two stage cuts by hand, and a written plan that the product reads
back as the intended 2-stage pipeline (stages, rows, micro-batches, schedule) and simulates."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import fidelity  # noqa: E402


def test_stage_cuts_hand_values():
    # prefix sums 0, 1, 2, 3, 4 of 4: balanced cut 2 (max 2); share 1/4 at cut 1
    assert fidelity.stage_cuts([1.0, 1.0, 1.0, 1.0]) == {"bal": 2, "unbal": 1}
    # times 6, 1, 1, 2 (total 10): larger stage at cuts 1, 2, 3 = 6, 7, 8 -> bal 1; shares 0.6, 0.7, 0.8, all
    # but cut 1 allowed for unbal, closest to 0.25 is 0.7 (cut 2)
    assert fidelity.stage_cuts([6.0, 1.0, 1.0, 2.0]) == {"bal": 1, "unbal": 2}
    # times 1, 1, 1, 5, 2 (total 10): larger stage at cuts 1..4 = 9, 8, 7, 8 -> bal 3; shares 0.1, 0.2, 0.3, 0.8:
    # 0.2 (cut 2) is the closest to 0.25
    assert fidelity.stage_cuts([1.0, 1.0, 1.0, 5.0, 2.0]) == {"bal": 3, "unbal": 2}


def test_pipeline_plan_rows_and_stages():
    single = {"version": 2, "model": {"batch_size": 8}, "baselines": {}, "predicted": {"x": 1},
              "decisions": [{"group": g, "rows": {"a/0": 8}, "sync": None, "server": None, "sfb": []}
                            for g in range(3)]}
    plan = fidelity.pipeline_plan(single, 1, ("a/0", "a/1"), "kfkb", 2, 4)
    assert [d["rows"] for d in plan["decisions"]] == [{"a/0": 8}, {"a/1": 8}, {"a/1": 8}]
    assert plan["stages"] == [{"groups": [0], "devices": ["a/0"]}, {"groups": [1, 2], "devices": ["a/1"]}]
    assert (plan["micro_batches"], plan["schedule"], plan["k"]) == (4, "kfkb", 2)
    assert "baselines" not in plan and plan["predicted"] == {}
    assert fidelity.pipeline_plan(single, 2, ("a/0", "a/1"), "1f1b", 2, 2)["k"] == 1  # k only for kfkb
    assert single["decisions"][0]["rows"] == {"a/0": 8}  # the input is not changed


def test_pipeline_plans_read_back_by_the_product(tmp_path):
    model = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
    topo = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")
    single = tmp_path / "mlp-single-device.json"
    subprocess.run([sys.executable, "-m", "tag.cli", "plan", model, topo, "--baseline", "single-device",
                    "--batch-size", "16", "-o", str(single), "--json"], check=True, capture_output=True)
    with open(single) as f:
        base = json.load(f)
    n = len(base["decisions"])
    with open(tmp_path / "p.json", "w") as f:
        json.dump(fidelity.pipeline_plan(base, 2, ("local/0", "local/1"), "1f1b", 1, 4), f)
    from tag.modelio import load_inputs
    from tag.sim import simulate

    inp = load_inputs(model, topo, plan_path=str(tmp_path / "p.json"))
    pipe = inp.strategy.pipeline
    assert [(st.groups, st.devices) for st in pipe.stages] == [((0, 1), (0,)), (tuple(range(2, n)), (1,))]
    assert (pipe.micro_batches, pipe.schedule) == (4, "1f1b")
    assert [d.rows[:2] for d in inp.strategy.decisions] == [(16, 0)] * 2 + [(0, 16)] * (n - 2)
    res = simulate(inp.gg, inp.cluster, inp.cost, inp.strategy, inp.training)
    assert 0 < res.iteration_ms < float("inf")

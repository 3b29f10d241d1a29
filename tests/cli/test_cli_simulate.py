"""`tag simulate` end to end on a tiny ONNX MLP: JSON keys, plans (round trip, mismatches), trace, table."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tag.cli import main
from tag.strategy.planfile import write_plan
from tag.strategy.planfile_read import read_plan

TOPO = {"version": 1, "machines": [
    {"name": "m0", "devices": [{"type": "V100-16GB", "count": 2}], "nic_bandwidth_gbps": 100},
    {"name": "m1", "devices": [{"type": "T4-16GB", "count": 1}], "nic_bandwidth_gbps": 25}]}


def write_mlp(path, seed=0):
    """x[N,64] -> MatMul W1[64,128] -> Relu -> MatMul W2[128,10] -> y."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 128)).astype(np.float32), "W1")
    w2 = numpy_helper.from_array(rng.standard_normal((128, 10)).astype(np.float32), "W2")
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(path))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    model, topo = d / "mlp.onnx", d / "topo.json"
    write_mlp(model)
    topo.write_text(json.dumps(TOPO))
    return d, str(model), str(topo)


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_keys_and_consistency(files, capsys):
    d, model, topo = files
    code, out, err = run_cli(capsys, "simulate", model, topo, "--baseline", "dp-even", "--batch-size", "30", "--json")
    assert code == 0, err
    obj = json.loads(out)
    for key in ("iteration_ms", "samples_per_s", "oom", "oom_devices", "peak_memory_gb"):
        assert key in obj
    assert obj["batch_size"] == 30 and obj["oom"] is False and obj["oom_devices"] == []
    assert obj["samples_per_s"] == pytest.approx(30 / (obj["iteration_ms"] / 1e3))
    assert sorted(obj["peak_memory_gb"]) == ["m0/0", "m0/1", "m1/0"]


def _plan_from_baseline(model, topo, path, name="dp-proportional", batch=30):
    from tag.modelio import ModelOptions, load_inputs
    from tag.search.baselines import build_baseline

    inp = load_inputs(model, topo, ModelOptions(batch_size=batch, optimizer="momentum"))
    s = build_baseline(name, inp.gg, inp.cluster, inp.cost, inp.training)
    write_plan(str(path), s, inp.gg, inp.cluster, inp.training, model, topo, cost=inp.cost)
    return s, inp


def test_plan_round_trip_and_simulation_match_the_baseline(files, capsys):
    d, model, topo = files
    plan = d / "plan.json"
    s, inp = _plan_from_baseline(model, topo, plan)
    back, meta = read_plan(str(plan), inp.cluster)
    assert back == s
    assert meta.training.optimizer == "momentum" and meta.batch_size == 30
    code, out, err = run_cli(capsys, "simulate", model, topo, "--plan", str(plan), "--json")
    assert code == 0, err
    via_plan = json.loads(out)
    # the plan carries batch and optimizer; the same strategy simulated directly gives the same time
    from tag.sim import simulate
    direct = simulate(inp.gg, inp.cluster, inp.cost, s, inp.training)
    assert via_plan["iteration_ms"] == pytest.approx(direct.iteration_ms)
    assert via_plan["batch_size"] == 30


def test_plan_for_another_model_is_one_line_exit_2(files, capsys):
    d, model, topo = files
    plan = d / "plan2.json"
    _plan_from_baseline(model, topo, plan, name="dp-even")
    other = d / "other.onnx"
    write_mlp(other, seed=1)  # same ops, different weights: a different file
    code, out, err = run_cli(capsys, "simulate", str(other), topo, "--plan", str(plan))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "model.sha256" in err and str(plan) in err


def test_plan_batch_contradicting_flag_and_bad_rows(files, capsys):
    d, model, topo = files
    plan = d / "plan3.json"
    _plan_from_baseline(model, topo, plan, name="dp-even")
    code, _, err = run_cli(capsys, "simulate", model, topo, "--plan", str(plan), "--batch-size", "64")
    assert code == 2 and "model.batch_size" in err
    code, _, err = run_cli(capsys, "simulate", model, topo, "--plan", str(plan), "--groups", "2")
    assert code == 2 and err.startswith("tag simulate: error: --groups")
    obj = json.loads(plan.read_text())
    obj["decisions"][0]["rows"]["m0/0"] += 1
    plan.write_text(json.dumps(obj))
    code, _, err = run_cli(capsys, "simulate", model, topo, "--plan", str(plan))
    assert code == 2 and err.count("\n") == 1 and "decisions[0].rows" in err


def test_human_table_and_trace(files, capsys):
    d, model, topo = files
    trace = d / "trace.json"
    code, out, err = run_cli(capsys, "simulate", model, topo, "--baseline", "m-etf", "--batch-size", "16",
                             "--trace", str(trace))
    assert code == 0, err
    assert "busy ms" in out and "usable GB" in out and "m1/0" in out
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(e.get("ph") == "X" for e in events)


def test_needs_plan_or_baseline(files, capsys):
    d, model, topo = files
    with pytest.raises(SystemExit) as e:
        main(["simulate", model, topo])
    assert e.value.code == 2
    capsys.readouterr()


def test_cli_baseline_names_match_the_registry():
    from tag.cli.util import BASELINE_NAMES
    from tag.search.baselines import BASELINES

    assert BASELINE_NAMES == list(BASELINES)

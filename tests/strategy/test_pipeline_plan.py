"""plan.json version 2 pipelines: stages, micro_batches, schedule and k written, read back equal, and every
mistake an exit-2 one-line error naming the JSON path, through `tag simulate --plan` (the verb users run) and
`read_plan`.

The model is x[N,64] -> mm1 -> relu -> mm2 (three groups, one op each, a chain 0 -> 1 -> 2) on four devices
m0/0, m0/1 (V100), m1/0, m1/1 (GTX1080Ti); the base pipeline puts groups 0-1 on m0 (8 + 8 rows) and group 2 on
m1 (12 + 4 rows), 4 micro-batches of 1F1B: per micro-batch 2 + 2 and 3 + 1 rows.
"""

import copy
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tag.cli import main
from tag.errors import InputError
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.pipeline import Pipeline, Stage
from tag.strategy.plancheck import validate_plan
from tag.strategy.planfile import plan_to_json, write_plan
from tag.strategy.planfile_read import parse_plan, read_plan
from tag.strategy.regroup import groupgraph_from_partition
from tag.topology import parse_topology

from strategy_helpers import TOPO

B = 16


def _write_model(path, batchnorm=False):
    """x[N,64] -> MatMul W1 -> (BatchNormalization training_mode=1 ->) Relu -> MatMul W2 -> y[N,10]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W1"),
             numpy_helper.from_array(rng.standard_normal((32, 10)).astype(np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1")]
    relu_in = "h"
    if batchnorm:
        for name, value in (("scale", 1.0), ("bias", 0.0), ("mean", 0.0), ("var", 1.0)):
            inits.append(numpy_helper.from_array(np.full(32, value, np.float32), name))
        nodes.append(helper.make_node("BatchNormalization", ["h", "scale", "bias", "mean", "var"],
                                      ["hn", "running_mean", "running_var"], name="bn", training_mode=1))
        relu_in = "hn"
    nodes += [helper.make_node("Relu", [relu_in], ["r"], name="relu"),
              helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from tag.graph import load_model

    d = tmp_path_factory.mktemp("pipe")
    model, topo = d / "mlp.onnx", d / "topo.json"
    _write_model(model)
    topo.write_text(json.dumps(TOPO))
    graph = load_model(str(model), batch_size=B)
    assert [op.name for op in graph.ops] == ["mm1", "relu", "mm2"]
    gg = groupgraph_from_partition(graph, [[0], [1], [2]])
    return d, str(model), str(topo), parse_topology(TOPO, str(topo)), graph, gg


def base_strategy(m=4, schedule="1f1b", k=1):
    return Strategy((Decision((8, 8, 0, 0), sync="ring"), Decision((8, 8, 0, 0)), Decision((0, 0, 12, 4), sync="ring")),
                    pipeline=Pipeline((Stage((0, 1), (0, 1)), Stage((2,), (2, 3))), m, schedule, k))


def plan_of(env, strategy=None):
    _, model, topo, cluster, _, gg = env
    return plan_to_json(strategy or base_strategy(), gg, cluster, TrainingConfig(), model, topo)


def simulate(env, plan, capsys):
    """`tag simulate MODEL TOPOLOGY --plan p.json --json` on `plan`: (exit code, stderr)."""
    d, model, topo = env[:3]
    path = d / "p.json"
    path.write_text(json.dumps(plan))
    code = main(["simulate", model, topo, "--plan", str(path), "--json"])
    return code, capsys.readouterr().err


def expect_exit_2(env, plan, where, capsys):
    code, err = simulate(env, plan, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"p.json: {where}: expected" in err, err
    return err


# ---------------------------------------------------------------- writing and reading


def test_written_keys_and_layout(env):
    plan = plan_of(env)
    assert list(plan)[:7] == ["version", "bucket_mb", "buckets", "stages", "micro_batches", "schedule", "k"]
    assert plan["stages"] == [{"groups": [0, 1], "devices": ["m0/0", "m0/1"]},
                              {"groups": [2], "devices": ["m1/0", "m1/1"]}]
    assert (plan["micro_batches"], plan["schedule"], plan["k"]) == (4, "1f1b", 1)
    plain = plan_of(env, Strategy(base_strategy().decisions))
    assert not {"stages", "micro_batches", "schedule", "k"} & set(plain)  # no pipeline: no keys, not micro_batches 1


@pytest.mark.parametrize("m,schedule,k", [(4, "1f1b", 1), (4, "gpipe", 1), (4, "kfkb", 2), (2, "kfkb", 2),
                                          (1, "1f1b", 1)])
def test_round_trip_with_and_without_cluster(env, m, schedule, k):
    d, model, topo, cluster, graph, gg = env
    s = base_strategy(m, schedule, k)
    path = d / "rt.json"
    write_plan(str(path), s, gg, cluster, TrainingConfig(), model, topo)
    back, meta = read_plan(str(path), cluster)
    assert back == s and back.pipeline == s.pipeline
    back2, meta2 = read_plan(str(path))  # device order implied by the file: the same here
    assert meta2.device_ids == ("m0/0", "m0/1", "m1/0", "m1/1") and back2 == s
    strategy, _, _ = validate_plan(str(path), graph, gg, cluster, model, topo)
    assert strategy.pipeline == s.pipeline


def test_stage_device_without_rows_is_kept_when_read_without_cluster(env):
    # stage 1 owns m1/0 and m1/1 but group 2 runs on m1/0 alone: the file still names m1/1, in stage order
    s = Strategy(base_strategy().decisions[:2] + (Decision((0, 0, 16, 0)),),
                 pipeline=Pipeline((Stage((0, 1), (0, 1)), Stage((2,), (2, 3))), 4))
    back, meta = parse_plan(plan_of(env, s), "p.json")
    assert meta.device_ids == ("m0/0", "m0/1", "m1/0", "m1/1")
    assert back.pipeline.stages[1].devices == (2, 3)


def test_stage_lists_in_any_order_read_sorted(env):
    plan = plan_of(env)
    plan["stages"][0] = {"groups": [1, 0], "devices": ["m0/1", "m0/0"]}
    back, _ = parse_plan(plan, "p.json", env[3])
    assert back.pipeline.stages[0] == Stage((0, 1), (0, 1))


def test_schedule_and_k_default_to_1f1b_and_1(env):
    plan = plan_of(env)
    del plan["schedule"], plan["k"]
    back, _ = parse_plan(plan, "p.json", env[3])
    assert (back.pipeline.schedule, back.pipeline.k) == ("1f1b", 1)


def test_version_1_file_still_reads_without_pipeline(env):
    plan = plan_of(env, Strategy(base_strategy().decisions))
    v1 = {k: v for k, v in plan.items() if k not in ("bucket_mb", "buckets")}
    v1["version"] = 1
    for dec in v1["decisions"]:
        dec["sync"] = {"ring": "allreduce"}.get(dec["sync"], dec["sync"])
    back, _ = parse_plan(v1, "p.json", env[3])
    assert back.pipeline is None and back.decisions == base_strategy().decisions


def test_valid_pipelined_plan_passes_the_verbs_checks(env):
    """The base plan gets through every check `tag simulate` makes before simulating (it may then simulate or
    not, depending on the simulator; only the reading is this file's business)."""
    d, model, topo, cluster, graph, gg = env
    from tag.modelio import load_inputs

    path = d / "ok.json"
    path.write_text(json.dumps(plan_of(env)))
    inp = load_inputs(model, topo, plan_path=str(path))
    assert inp.strategy == base_strategy()


# ---------------------------------------------------------------- every mistake: exit 2, one line, JSON path


def _mutate(**changes):
    """A function that applies top-level changes (None deletes the key) to a copy of the plan."""
    def f(plan):
        plan = copy.deepcopy(plan)
        for key, value in changes.items():
            if value is None:
                plan.pop(key, None)
            else:
                plan[key] = value
        return plan
    return f


def _stage(s, **fields):
    def f(plan):
        plan = copy.deepcopy(plan)
        plan["stages"][s].update(fields)
        return plan
    return f


def _rows(group, rows):
    def f(plan):
        plan = copy.deepcopy(plan)
        plan["decisions"][group]["rows"] = rows
        return plan
    return f


M0, M1 = ["m0/0", "m0/1"], ["m1/0", "m1/1"]

# name -> (change to the base plan, JSON path of the error, a word the message must contain)
MISTAKES = {
    "group in no stage": (_stage(0, groups=[0]), "stages", "group 1 in no stage"),
    "group in two stages": (_stage(1, groups=[2, 1]), "stages[1].groups[1]", "also in stages[0]"),
    "group twice in one stage": (_stage(0, groups=[0, 1, 0]), "stages[0].groups[2]", "twice"),
    "group id out of range": (_stage(1, groups=[2, 3]), "stages[1].groups[1]", "0..2"),
    "device in two stages": (_stage(1, devices=["m0/1", "m1/0", "m1/1"]), "stages[1].devices[0]",
                             "also in stages[0]"),
    "unknown device in a stage": (_stage(1, devices=["m1/0", "m9/9"]), "stages[1].devices[1]", "m9/9"),
    "stage with no groups": (_stage(1, groups=[]), "stages[1].groups", "empty stage"),
    "stage with no devices": (_stage(1, devices=[]), "stages[1].devices", "non-empty"),
    "no stages at all": (_mutate(stages=[]), "stages", "non-empty"),
    "stages not a list": (_mutate(stages={"groups": [0]}), "stages", "non-empty list"),
    "stage not an object": (_mutate(stages=[[0, 1, 2]]), "stages[0]", "groups and devices"),
    "micro_batches without stages": (_mutate(stages=None), "stages", "micro_batches"),
    "micro_batches missing": (_mutate(micro_batches=None), "micro_batches", "integer >= 1"),
    "micro_batches 0": (_mutate(micro_batches=0), "micro_batches", "integer >= 1"),
    "micro_batches negative": (_mutate(micro_batches=-4), "micro_batches", "integer >= 1"),
    "micro_batches a float": (_mutate(micro_batches=4.0), "micro_batches", "integer >= 1"),
    "micro_batches a string": (_mutate(micro_batches="4"), "micro_batches", "integer >= 1"),
    "micro_batches a boolean": (_mutate(micro_batches=True), "micro_batches", "integer >= 1"),
    # group 2's m1/1 has 4 rows: 8 micro-batches would give it half a row each
    "micro_batches above a replica's rows": (_mutate(micro_batches=8), "micro_batches",
                                             "decisions[2].rows.m1/1 has 4 rows"),
    "rows not a multiple of micro_batches": (_rows(2, {"m1/0": 10, "m1/1": 6}), "decisions[2].rows.m1/0",
                                             "multiple of micro_batches 4"),
    "rows on a device outside the stage": (_rows(2, {"m0/1": 4, "m1/0": 8, "m1/1": 4}), "decisions[2].rows.m0/1",
                                           "stages[1]"),
    "unknown schedule": (_mutate(schedule="zb-h1"), "schedule", "gpipe, 1f1b, kfkb"),
    "k zero": (_mutate(schedule="kfkb", k=0), "k", "integer >= 1"),
    "k a float": (_mutate(schedule="kfkb", k=2.0), "k", "integer >= 1"),
    "k not dividing micro_batches": (_mutate(schedule="kfkb", k=3), "k", "divisor of micro_batches 4"),
    "k above 1 with 1f1b": (_mutate(k=2), "k", "kfkb"),
    "k above 1 with gpipe": (_mutate(schedule="gpipe", k=2), "k", "kfkb"),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_mistake_exits_2_naming_the_json_path(env, name, capsys):
    change, where, word = MISTAKES[name]
    err = expect_exit_2(env, change(plan_of(env)), where, capsys)
    assert word in err, err


@pytest.mark.parametrize("name", ["group in no stage", "device in two stages", "micro_batches above a replica's rows",
                                  "rows not a multiple of micro_batches", "k not dividing micro_batches",
                                  "unknown schedule", "stage with no groups"])
def test_read_plan_raises_the_same_errors(env, name):
    change, where, _ = MISTAKES[name]
    path = env[0] / "r.json"
    path.write_text(json.dumps(change(plan_of(env))))
    with pytest.raises(InputError) as e:
        read_plan(str(path))
    assert e.value.where == where and e.value.file == str(path)


def test_unknown_stage_device_through_read_plan_with_cluster(env):
    path = env[0] / "r.json"
    path.write_text(json.dumps(_stage(1, devices=["m1/0", "m9/9"])(plan_of(env))))
    with pytest.raises(InputError) as e:
        read_plan(str(path), env[3])
    assert e.value.where == "stages[1].devices[1]"


def test_cyclic_cut_exits_2(env, capsys):
    # stage 0 = groups 0 and 2, stage 1 = group 1: the edge 1 -> 2 runs from stage 1 back to stage 0
    s = Strategy((Decision((8, 8, 0, 0), sync="ring"), Decision((0, 0, 8, 8)), Decision((8, 8, 0, 0), sync="ring")),
                 pipeline=Pipeline((Stage((0, 2), (0, 1)), Stage((1,), (2, 3))), 4))
    plan = plan_of(env, s)
    assert parse_plan(plan, "p.json", env[3])[0] == s  # the file alone cannot tell: the cut needs the model's edges
    err = expect_exit_2(env, plan, "stages[0].groups", capsys)
    assert "group 2 consumes group 1's output" in err and "stages[1]" in err, err


def test_training_mode_batchnorm_with_micro_batches_exits_2(tmp_path, capsys):
    from tag.graph import load_model

    model, topo = tmp_path / "bn.onnx", tmp_path / "topo.json"
    _write_model(model, batchnorm=True)
    topo.write_text(json.dumps(TOPO))
    graph = load_model(str(model), batch_size=B)
    assert [op.op_type for op in graph.ops] == ["MatMul", "BatchNormalization", "Relu", "MatMul"]
    gg = groupgraph_from_partition(graph, [[0, 1], [2], [3]])
    cluster = parse_topology(TOPO, str(topo))
    env = (tmp_path, str(model), str(topo), cluster, graph, gg)
    err = expect_exit_2(env, plan_of(env), "micro_batches", capsys)
    assert "BatchNormalization" in err and "'bn'" in err and "set micro_batches to 1" in err, err
    one = base_strategy(m=1)  # one micro-batch is the whole batch: statistics as on one device
    strategy, _, _ = validate_plan(plan_of(env, one), graph, gg, cluster, str(model), str(topo), plan_path="p.json")
    assert strategy == one

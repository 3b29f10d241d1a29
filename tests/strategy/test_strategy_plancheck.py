"""Plan validation against the model and topology, and the GroupGraph rebuilt from a plan's groups."""

import json

import pytest

from tag.errors import InputError
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.plancheck import validate_plan
from tag.strategy.planfile import plan_to_json
from tag.strategy.regroup import groupgraph_from_partition, partition_problems
from tag.topology import parse_topology

from strategy_helpers import TOPO, tiny_graph


@pytest.fixture
def env(tmp_path):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(b"model bytes")
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(TOPO))
    return str(model), str(topo), parse_topology(TOPO, str(topo)), tiny_graph()


def three_groups(graph):
    return groupgraph_from_partition(graph, [[0], [1], [2]])


def good_strategy():
    return Strategy((Decision((2, 2, 2, 2), sync="allreduce", sfb=("mm1",)),
                     Decision((2, 2, 2, 2)),
                     Decision((0, 8, 0, 0))))


def plan_of(env, strategy=None, gg=None):
    model, topo, cluster, graph = env
    return plan_to_json(strategy or good_strategy(), gg or three_groups(graph), cluster, TrainingConfig(), model, topo)


def check(env, plan, gg=None):
    model, topo, cluster, graph = env
    return validate_plan(plan, graph, gg, cluster, model, topo, plan_path="p.json")


def test_valid_plan_rebuilds_groups_from_the_plan(env):
    model, topo, cluster, graph = env
    # the caller's gg has a different partition: the plan's groups win
    other = groupgraph_from_partition(graph, [[0, 1], [2]])
    strategy, gg, meta = check(env, plan_of(env), gg=other)
    assert strategy == good_strategy()
    assert [g.op_ids for g in gg.groups] == [[0], [1], [2]]
    # figures worked out by hand from tiny_graph: mm1 512 FLOP/row, relu 16, edges carry 16 floats/row
    assert [g.fwd_flops_per_row for g in gg.groups] == [512, 16, 128]
    assert [g.param_bytes for g in gg.groups] == [1024, 0, 256]
    assert [(e.src, e.dst, e.tensors, e.bytes_per_row) for e in gg.edges] == [(0, 1, ["h"], 64.0), (1, 2, ["r"], 64.0)]
    same = three_groups(graph)
    assert check(env, plan_of(env), gg=same)[1] is same  # an equal partition is reused


def _expect(env, plan, where, gg=None):
    with pytest.raises(InputError) as e:
        check(env, plan, gg)
    assert e.value.file == "p.json"
    assert e.value.where == where, str(e.value)
    return e.value


def test_hash_mismatches(env):
    p = plan_of(env)
    p["model"]["sha256"] = "0" * 64
    err = _expect(env, p, "model.sha256")
    assert "0000" in err.found
    p = plan_of(env)
    p["topology"]["sha256"] = "f" * 64
    _expect(env, p, "topology.sha256")


def test_op_name_errors(env):
    p = plan_of(env)
    p["groups"][1]["ops"] = ["relu", "nope"]
    _expect(env, p, "groups[1].ops[1]")
    p = plan_of(env)
    p["groups"][1]["ops"] = ["relu", "mm1"]  # mm1 twice
    _expect(env, p, "groups[1].ops")
    p = plan_of(env)
    p["groups"][1]["ops"] = []
    _expect(env, p, "groups[1].ops")


def test_groups_out_of_topological_order(env):
    p = plan_of(env)
    p["groups"][0]["ops"], p["groups"][2]["ops"] = ["mm2"], ["mm1"]
    err = _expect(env, p, "groups[1]")  # relu (group 1) consumes h from mm1, now in group 2
    assert "'relu'" in err.found


def test_sync_consistency(env):
    _expect(env, plan_of(env, Strategy((Decision((2, 2, 2, 2)), Decision((2, 2, 2, 2)), Decision((0, 8, 0, 0))))),
            "decisions[0].sync")  # replicated with params needs a sync
    _expect(env, plan_of(env, good_strategy().replace(1, Decision((2, 2, 2, 2), sync="allreduce"))),
            "decisions[1].sync")  # no params
    _expect(env, plan_of(env, good_strategy().replace(2, Decision((0, 8, 0, 0), sync="ps", server=1))),
            "decisions[2].sync")  # one device
    ok = good_strategy().replace(0, Decision((2, 2, 2, 2), sync="ps", server=3))
    assert check(env, plan_of(env, ok))[0] == ok  # a ps server may be any device


def test_sfb_must_name_a_param_op_of_the_group(env):
    _expect(env, plan_of(env, good_strategy().replace(0, Decision((2, 2, 2, 2), sync="allreduce", sfb=("mm2",)))),
            "decisions[0].sfb[0]")
    model, topo, cluster, graph = env
    two = groupgraph_from_partition(graph, [[0, 1], [2]])
    s = Strategy((Decision((2, 2, 2, 2), sync="allreduce", sfb=("relu",)), Decision((0, 8, 0, 0))))
    _expect(env, plan_of(env, s, two), "decisions[0].sfb[0]")


def test_unsplittable_group_on_several_devices(env):
    model, topo, cluster, graph = env
    graph.ops[2].splittable = False
    _expect(env, plan_of(env, good_strategy().replace(2, Decision((4, 4, 0, 0), sync="allreduce"))), "decisions[2].rows")


def test_batch_mismatch_with_loaded_model(env):
    model, topo, cluster, graph = env
    graph.batch_size = 16
    _expect(env, plan_of(env), "model.batch_size")


def test_partition_problems_by_brute_force(env):
    """Every assignment of 3 ops to ordered groups: usable iff each op once and groups are non-decreasing."""
    import itertools

    graph = env[3]
    for assign in itertools.product(range(3), repeat=3):
        k = max(assign) + 1
        groups = [[i for i in range(3) if assign[i] == g] for g in range(k)]
        ok = all(groups) and list(assign) == sorted(assign)  # chain graph: topological iff non-decreasing
        assert (partition_problems(graph, groups) == []) == ok, assign


def test_group_using_a_shared_parameter_needs_a_sync(env):
    model, topo, cluster, graph = env
    graph.ops[1].params = ["W1"]  # relu (group 1) now also reads W1, owned by group 0
    graph.tensors["W1"].consumers = [0, 1]
    gg = three_groups(graph)
    assert gg.shared_params == {"W1": [0, 1]}
    _expect(env, plan_of(env, good_strategy(), gg), "decisions[1].sync")
    ok = good_strategy().replace(1, Decision((2, 2, 2, 2), sync="allreduce"))
    assert check(env, plan_of(env, ok, gg))[0] == ok

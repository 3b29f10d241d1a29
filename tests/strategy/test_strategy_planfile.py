"""plan.json v1: writing, reading, round trips, structural errors (tiny hand-made graph and cluster)."""

import json

import pytest

from tag.errors import InputError
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.graph.reader import file_sha256
from tag.strategy.planfile import dumps_plan, plan_to_json, write_plan
from tag.strategy.planfile_read import load_plan_json, read_plan
from tag.strategy.regroup import groupgraph_from_partition
from tag.topology import parse_topology

from strategy_helpers import TOPO, tiny_graph


@pytest.fixture
def setup(tmp_path):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(b"not really onnx, only hashed")
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps(TOPO))
    cluster = parse_topology(TOPO, str(topo))
    graph = tiny_graph()
    gg = groupgraph_from_partition(graph, [[0, 1], [2]])
    return tmp_path, str(model), str(topo), cluster, graph, gg


def strategy_a():
    return Strategy((
        Decision(rows=(3, 3, 1, 1), sync="ps", server=2, sfb=("mm1",)),
        Decision(rows=(0, 0, 8, 0)),
    ))


def test_round_trip_gives_same_strategy(setup):
    tmp, model, topo, cluster, graph, gg = setup
    s = strategy_a()
    path = tmp / "p.json"
    write_plan(str(path), s, gg, cluster, TrainingConfig(optimizer="sgd"), model, topo,
               search={"method": "baseline:test", "seed": 0})
    back, meta = read_plan(str(path), cluster)
    assert back == s
    assert meta.groups == [["mm1", "relu"], ["mm2"]]
    assert meta.training == TrainingConfig(optimizer="sgd")
    assert meta.batch_size == 8
    assert meta.model_sha256 == file_sha256(model)
    assert meta.search == {"method": "baseline:test", "seed": 0}
    # without the cluster, indices follow the order the file implies: m0/0, m0/1, m1/0 (m1/1 never used)
    back2, meta2 = read_plan(str(path))
    assert meta2.device_ids == ("m0/0", "m0/1", "m1/0", "m1/1")
    assert back2 == s


def test_written_json_layout(setup):
    tmp, model, topo, cluster, graph, gg = setup
    plan = plan_to_json(strategy_a(), gg, cluster, TrainingConfig(), model, topo)
    assert list(plan) == ["version", "bucket_mb", "buckets", "model", "topology", "training", "groups", "decisions"]
    d0 = plan["decisions"][0]
    assert list(d0["rows"].items()) == [("m0/0", 3), ("m0/1", 3), ("m1/0", 1), ("m1/1", 1)]
    assert d0["sync"] == "ps" and d0["server"] == "m1/0" and d0["sfb"] == ["mm1"]
    assert plan["decisions"][1]["rows"] == {"m1/0": 8}  # only devices with rows > 0
    assert plan["model"]["batch_size"] == 8
    assert plan["topology"]["sha256"] == file_sha256(topo)
    # deterministic: the same inputs give the same bytes
    assert dumps_plan(plan) == dumps_plan(plan_to_json(strategy_a(), gg, cluster, TrainingConfig(), model, topo))


def _write_raw(tmp, plan):
    p = tmp / "raw.json"
    p.write_text(json.dumps(plan))
    return str(p)


@pytest.mark.parametrize("mutate, where", [
    (lambda p: p.update(version=3), "version"),
    (lambda p: p["decisions"][0]["rows"].update({"m0/0": 4}), "decisions[0].rows"),
    (lambda p: p["decisions"][1].update(rows={"m9/0": 8}), "decisions[1].rows.m9/0"),
    (lambda p: p["decisions"][0]["rows"].update({"m0/1": 0}), "decisions[0].rows.m0/1"),
    (lambda p: p["decisions"][0].update(server="m7/7"), "decisions[0].server"),
    (lambda p: p["decisions"][1].update(server="m0/0"), "decisions[1].server"),
    (lambda p: p["decisions"][0].update(sync="allreduce"), "decisions[0].sync"),  # a v1 name
    (lambda p: p["decisions"][1].update(group=0), "decisions[1].group"),
    (lambda p: p["groups"][1].update(id=5), "groups[1].id"),
    (lambda p: p["model"].update(batch_size=0), "model.batch_size"),
    (lambda p: p["training"].update(optimizer="lamb"), "training.optimizer"),
    (lambda p: p.pop("decisions"), "decisions"),
])
def test_structural_errors_name_the_json_path(setup, mutate, where):
    tmp, model, topo, cluster, graph, gg = setup
    plan = plan_to_json(strategy_a(), gg, cluster, TrainingConfig(), model, topo)
    mutate(plan)
    path = _write_raw(tmp, plan)
    with pytest.raises(InputError) as e:
        read_plan(path, cluster)
    assert e.value.where == where
    assert e.value.file == path


def test_not_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError) as e:
        load_plan_json(str(bad))
    assert "line 1" in e.value.where
    with pytest.raises(InputError):
        load_plan_json(str(tmp_path / "missing.json"))


def test_contradictory_device_order_is_an_error(setup):
    tmp, model, topo, cluster, graph, gg = setup
    plan = plan_to_json(strategy_a(), gg, cluster, TrainingConfig(), model, topo)
    plan["decisions"][0]["rows"] = {"m0/1": 4, "m0/0": 4}
    plan["decisions"][1]["rows"] = {"m0/0": 4, "m0/1": 4}
    plan["decisions"][0].update(sync="ring", server=None)
    with pytest.raises(InputError) as e:
        read_plan(_write_raw(tmp, plan))
    assert e.value.where == "decisions"


def _strategies():
    """Random valid strategies for the 2-group tiny graph on the 4-device cluster (batch 8)."""
    from hypothesis import strategies as st

    def decision(draw_rows, sync_pick, server, sfb):
        rows = tuple(draw_rows)
        devices = [d for d, r in enumerate(rows) if r > 0]
        sync = sync_pick if len(devices) > 1 else None
        return Decision(rows=rows, sync=sync, server=server if sync == "ps" else None,
                        sfb=sfb if sync else ())

    rows = st.lists(st.integers(0, 8), min_size=3, max_size=3).filter(lambda r: sum(r) <= 8).map(
        lambda r: (*r, 8 - sum(r)))
    dec0 = st.builds(decision, rows, st.sampled_from(["allreduce", "hierarchical", "ps"]), st.integers(0, 3),
                     st.sampled_from([(), ("mm1",)]))
    dec1 = st.builds(decision, rows, st.sampled_from(["allreduce", "ps"]), st.integers(0, 3), st.just(()))
    return st.builds(lambda a, b: Strategy((a, b)), dec0, dec1)


def test_round_trip_property(tmp_path):
    from hypothesis import given, settings

    model = tmp_path / "m.onnx"
    model.write_bytes(b"m")
    topo = tmp_path / "t.json"
    topo.write_text(json.dumps(TOPO))
    cluster = parse_topology(TOPO, str(topo))
    gg = groupgraph_from_partition(tiny_graph(), [[0, 1], [2]])
    path = str(tmp_path / "p.json")

    @settings(max_examples=60, deadline=None)
    @given(_strategies())
    def check(s):
        write_plan(path, s, gg, cluster, TrainingConfig(), str(model), str(topo))
        assert read_plan(path, cluster)[0] == s
        back, meta = read_plan(path)  # without the cluster: same maps over the devices the file uses
        full = {dev: k for k, dev in enumerate(cluster.devices[i].id for i in range(4))}
        for a, b in zip(s.decisions, back.decisions):
            assert {cluster.devices[d].id: r for d, r in enumerate(a.rows) if r} == \
                   {meta.device_ids[d]: r for d, r in enumerate(b.rows) if r}
            assert a.sync == b.sync and a.sfb == b.sfb
            if a.server is not None:
                assert cluster.devices[a.server].id == meta.device_ids[b.server]
        # within every row map the inferred order agrees with topology order (what slices depend on)
        for b in back.decisions:
            topo_idx = [full[meta.device_ids[d]] for d in b.devices]
            assert topo_idx == sorted(topo_idx)

    check()

"""The profile's `contention` block: JSON round trip and validation; `ProfileCostModel.scaled` by hand; the default
row counts of `tag profile ops`; the probe itself on 2 real ranks (figures in their physical ranges)."""

import json

import pytest

from tag.cli.profile import default_rows
from tag.cost.contention import ContentionTerms
from tag.cost.profile_db import from_json, load, save, to_json
from tag.cost.profiled import ProfileCostModel
from tag.errors import InputError
from tag.strategy import TrainingConfig

from test_profile_step_db import CPU, _db, _gg

BLOCK = {"clock": "thread", "ranks": 2, "rows": 32, "handoff_ms": 0.2, "alone_stretch": 1.01,
         "together_stretch": 1.05, "together_speed": 1.2, "alone_step_ms": 10.0, "together_step_ms": 12.0}


def _obj(**contention):
    return {"version": 1, "device_type": "cpu", "ops": {}, "contention": {**BLOCK, **contention}}


def test_round_trip_keeps_terms_and_provenance(tmp_path):
    db = from_json(_obj(), "p.json")
    assert db.contention == ContentionTerms(2, 32, 0.2, 1.01, 1.05, 1.2, "thread")
    path = tmp_path / "p.json"
    save(db, str(path))
    again = load(str(path))
    assert again.contention == db.contention
    assert json.loads(path.read_text())["contention"]["together_step_ms"] == 12.0  # provenance kept
    assert "contention" not in to_json(from_json({"version": 1, "device_type": "cpu"}))
    with_cores = from_json(_obj(cores=4), "p.json")
    assert with_cores.contention.cores == 4 and to_json(with_cores)["contention"]["cores"] == 4
    assert db.contention.cores is None and "cores" not in to_json(db)["contention"]


@pytest.mark.parametrize("key,value,expected", [
    ("ranks", 0, "a positive integer"), ("rows", 1.5, "a positive integer"),
    ("together_speed", 0, "a positive number"), ("alone_stretch", "x", "a positive number"),
    ("handoff_ms", -1, "a non-negative number"), ("clock", "cpu", "one of thread, wall"),
    ("cores", 0, "a positive integer"), ("cores", True, "a positive integer")])
def test_bad_values_name_the_key(key, value, expected):
    with pytest.raises(InputError) as e:
        from_json(_obj(**{key: value}), "p.json")
    assert f"contention.{key}" in str(e.value) and expected in str(e.value) and "p.json" in str(e.value)


def test_scaled_multiplies_compute_update_and_copies_only():
    gg = _gg()
    base = ProfileCostModel(gg, TrainingConfig(), _db(gg))
    twice = base.scaled(2.0)
    for g in (0, 1):
        assert twice.group_fwd_ms(g, CPU, 3) == pytest.approx(2 * base.group_fwd_ms(g, CPU, 3))
        assert twice.group_bwd_ms(g, CPU, 4) == pytest.approx(2 * base.group_bwd_ms(g, CPU, 4))
        assert twice.update_ms(g, CPU) == pytest.approx(2 * base.update_ms(g, CPU))
    assert twice.sync_copy_ms(CPU, 2000) == pytest.approx(tuple(2 * x for x in base.sync_copy_ms(CPU, 2000)))
    assert base.scaled(2.0).scaled(1.5).compute_scale == pytest.approx(3.0)
    assert base.compute_scale == 1.0  # a copy: the model itself unchanged


def test_default_rows_reach_the_batch():
    assert default_rows(64) == [1, 2, 4, 8, 16, 32, 64]
    assert default_rows(48) == [1, 2, 4, 8, 16, 32, 48]
    assert default_rows(2) == [1, 2]


def test_probe_on_two_ranks(tmp_path):
    """The probe end to end on mlp (2 spawned gloo ranks): ratios near 1 and a sub-10-ms handoff on any machine
    that runs the suite; together_speed is the ratio of the two step figures it reports."""
    import os

    from tag.graph import load_model
    from tag.graph.coarsen import coarsen
    from tag.profile.contention import measure_contention

    model = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "mlp.onnx")
    graph = load_model(model, batch_size=8, n_devices=1)
    gg = coarsen(graph, k=None, n_devices=1)
    c = measure_contention(model, graph, [list(g.op_ids) for g in gg.groups], 4, ranks=2)
    assert c["ranks"] == 2 and c["rows"] == 4 and c["clock"] == "thread"
    assert 0 <= c["handoff_ms"] < 10
    assert 0.5 < c["alone_stretch"] < 20 and 0.5 < c["together_stretch"] < 20
    assert c["together_speed"] == pytest.approx(c["together_step_ms"] / c["alone_step_ms"])
    assert set(c["call_ms"]) == {"allreduce", "p2p"} and all(0 <= v < 50 for v in c["call_ms"].values())
    assert c["cores"] == len(os.sched_getaffinity(0))
    from_json({"version": 1, "device_type": "cpu", "contention": c}, "p.json")  # a valid block


@pytest.mark.parametrize("stretch, warned", [(1.01, False), (1.6, True)])
def test_profile_ops_warns_when_its_probe_ran_on_a_busy_machine(monkeypatch, tmp_path, capsys, stretch, warned):
    # BLOCK's together_stretch 1.05 is below 1.15 (its probe has no cores figure: ranks / cores taken as 1)
    """A rank computing alone that gets only 1/1.6 of its core means other processes hold the cores: `tag profile
    ops` says so on stderr (the ops are profiled for real; the probe's ranks are replaced by a block reading that
    stretch)."""
    import os

    import tag.profile.contention as probe
    from tag.cli import main

    block = {k: v for k, v in {**BLOCK, "alone_stretch": stretch}.items() if k not in ("alone_step_ms",
                                                                                        "together_step_ms")}
    monkeypatch.setattr(probe, "measure_contention", lambda *a, **k: block)
    model = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "mlp.onnx")
    capsys.readouterr()
    assert main(["profile", "ops", model, "-o", str(tmp_path / "p.json"), "--rows", "1"]) == 0
    err = capsys.readouterr().err
    assert ("the contention probe ran on a busy machine: one rank computing alone got 1/1.60" in err) == warned

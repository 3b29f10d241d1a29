"""The ablation's arithmetic (tag.bench.ablate, tag.bench.ablate_format) on hand-worked times, and one real case
whose columns are each re-planned here through `tag plan` with the documented flags."""

import json
import math

import pytest

from tag.bench.ablate import PARTS, AblationCase, command_line, run_ablation
from tag.bench.ablate_format import ablation_markdown, geomean_ratio
from tag.cli import main


def _case(**ms) -> AblationCase:
    names = dict(zip(("start", "start_refine", "uniform", "gnn", "tree_refine", "full"), PARTS))
    return AblationCase("m", "t", ms={names[k]: v for k, v in ms.items()}, bound_ms=50.0)


def test_shares_split_the_log_gain_along_the_chain():
    # start 160 -> uniform 80 (ln 2) -> gnn 80 (0) -> tree+refine 40 (ln 2) -> full 40 (0): total ln 4
    c = _case(start=160.0, start_refine=80.0, uniform=80.0, gnn=80.0, tree_refine=40.0, full=40.0)
    sh = c.shares()
    assert sh["tree (uniform)"] == pytest.approx(0.5) and sh["tree+refine"] == pytest.approx(0.5)
    assert sh["tree (GNN)"] == 0.0 and sh["full"] == 0.0
    assert sh["refine alone"] == pytest.approx(0.5)  # ln 2 / ln 4
    assert c.headroom == pytest.approx(160 / 50 - 1)


def test_a_slower_step_has_a_negative_share_and_oom_gives_nan():
    c = _case(start=100.0, start_refine=100.0, uniform=125.0, gnn=80.0, tree_refine=80.0, full=80.0)
    sh = c.shares()
    assert sh["tree (uniform)"] == pytest.approx(math.log(100 / 125) / math.log(100 / 80))
    assert sh["tree (uniform)"] + sh["tree (GNN)"] == pytest.approx(1.0)
    oom = _case(start=math.inf, start_refine=90.0, uniform=90.0, gnn=90.0, tree_refine=90.0, full=90.0)
    assert all(math.isnan(v) for v in oom.shares().values())


def test_geomean_ratio_and_headroom_filter():
    a = _case(start=100.0, start_refine=100.0, uniform=100.0, gnn=100.0, tree_refine=50.0, full=50.0)  # 2x
    b = _case(start=100.0, start_refine=80.0, uniform=100.0, gnn=100.0, tree_refine=40.0, full=40.0)  # 2x
    c = _case(start=52.0, start_refine=52.0, uniform=52.0, gnn=52.0, tree_refine=13.0, full=13.0)  # 4% headroom
    assert geomean_ratio([a, b], "full", "start") == (pytest.approx(math.sqrt(2 * 2.5)), 2)
    text = ablation_markdown([a, b, c])
    # a: 100/50, b: 80/40: 2x each; c (headroom 4 %) left out
    assert "tree+refine over start+refine, on the 2 cases with >= 20% headroom over the bound: 2.000x" in text


def test_headroom_over_the_latency_floor_filters_too():
    a = _case(start=100.0, start_refine=100.0, uniform=100.0, gnn=100.0, tree_refine=50.0, full=50.0)  # 2x
    b = _case(start=100.0, start_refine=90.0, uniform=100.0, gnn=100.0, tree_refine=30.0, full=30.0)  # 3x
    a.floor_ms, b.floor_ms = 10.0, 90.0  # a: 100 / max(50, 10) = 100 % headroom; b: 100 / 90 = 11 %
    assert a.headroom_floor == pytest.approx(1.0) and b.headroom_floor == pytest.approx(100 / 90 - 1)
    assert math.isnan(_case(start=100.0).headroom_floor)  # no floor recorded
    text = ablation_markdown([a, b])
    assert "on the 2 cases with >= 20% headroom over the bound: 2.449x" in text  # sqrt(2 x 3)
    assert "on the 1 of 2 cases with a latency floor and >= 20% headroom over max(bound, floor): 2.000x" in text


def test_command_lines():
    assert command_line("start", "m.onnx", "t.json", 60, 0) == \
        "tag plan m.onnx t.json --playouts 0 --no-refine --no-sfb --seed 0"
    assert command_line("tree (GNN)", "m.onnx", "t.json", 60, 3) == \
        "tag plan m.onnx t.json --playouts 60 --no-refine --no-sfb --seed 3"
    assert command_line("full", "m.onnx", "t.json", None, 0) == "tag plan m.onnx t.json --seed 0"
    assert command_line("start+refine", "m.onnx", "t.json", 8, 0, 100) == \
        "tag plan m.onnx t.json --simulations 100 --playouts 0 --no-sfb --seed 0"
    assert command_line("start", "m.onnx", "t.json", 8, 0, 100) == \
        "tag plan m.onnx t.json --playouts 0 --no-refine --no-sfb --seed 0"


def test_each_column_is_its_tag_plan_command(tmp_path, capsys):
    model, topo = "datasets/models/mlp.onnx", "datasets/topologies/cpu4.json"
    case = run_ablation(model, topo, playouts=4, refine_simulations=40, parts=("start", "tree (uniform)", "full"))
    for part in ("start", "tree (uniform)", "full"):
        args = command_line(part, model, topo, 4, 0, 40).split()[2:] + ["--json", "-o", str(tmp_path / "p.json")]
        assert main(["plan", *args]) == 0
        capsys.readouterr()
        with open(tmp_path / "p.json") as f:
            assert json.load(f)["predicted"]["iteration_ms"] == pytest.approx(case.ms[part], abs=1e-4), part


def test_bench_ablate_prints_the_table_with_random_clusters(capsys):
    code = main(["bench", "--ablate", "--models", "mlp", "--topologies", "cpu4", "--random", "1", "--playouts", "2",
                 "--simulations", "20", "--json"])
    obj = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(c["model"], c["topology"]) for c in obj["cases"]] == [("mlp", "cpu4"), ("mlp", "random-1")]
    for c in obj["cases"]:
        assert set(c["ms"]) == set(PARTS) and c["bound_ms"] > 0
        assert c["ms"]["full"] >= c["bound_ms"]  # no plan beats the compute bound


def test_random_needs_ablate(capsys):
    assert main(["bench", "--random", "2", "--models", "mlp", "--topologies", "cpu4"]) == 2
    assert "--random: without --ablate" in capsys.readouterr().err


@pytest.mark.parametrize("machines,sfb", [(16, True), (17, False)])
def test_full_runs_sfb_only_where_tag_plan_does(tmp_path, monkeypatch, machines, sfb):
    """`tag plan` skips SFB selection above SFB_MAX_DEVICES (128) devices; so does the ablation's `full` column:
    16 machines of 8 = 128 devices runs it, 17 = 136 does not (plan() is stopped at its call, its arguments read)."""
    import tag.search.planner as planner

    topo = tmp_path / "t.json"
    topo.write_text(json.dumps({"version": 1, "name": "t", "machines": [
        {"name": f"m{i}", "devices": [{"type": "V100-16GB", "count": 8}], "nic_bandwidth_gbps": 25}
        for i in range(machines)]}))
    seen = {}

    class Stop(Exception):
        pass

    def fake_plan(*args, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(planner, "plan", fake_plan)
    with pytest.raises(Stop):
        run_ablation("datasets/models/mlp.onnx", str(topo), parts=("full",))
    assert seen["sfb"] is sfb and seen["priors_fn"] is not None  # the GNN column's networks on any cluster

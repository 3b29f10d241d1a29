"""docs/profile.md: its examples load and drive the cost model as the page says; its required keys are required."""

import copy
import json
import os

import pytest

from tag.cli import main
from tag.cost.profile_db import from_json
from tag.cost.profiled import ProfileCostModel
from tag.errors import InputError
from tag.graph import load_model
from tag.graph.coarsen import coarsen
from tag.strategy import TrainingConfig
from tag.topology.catalog import CATALOG
from docs_fences import ROOT, json_fences, required_by_section

PAGE = "profile.md"
MLP = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
CPU4 = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")
GEMM = "Gemm|Nx512,512x512,512|58e34c6d"


def _blocks() -> list[dict]:
    blocks = [obj for _, obj in json_fences(PAGE)]
    assert len(blocks) == 2, "docs/profile.md: expected the minimal and the complete example"
    return blocks


def test_every_block_is_read_by_simulate_profile(tmp_path, capsys):
    for k, obj in enumerate(_blocks()):
        path = tmp_path / f"p{k}.json"
        path.write_text(json.dumps(obj))
        assert main(["simulate", MLP, CPU4, "--baseline", "dp-even", "--profile", str(path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["cost_model"] == f"profile:p{k}"


def test_minimal_example_interpolates_as_the_page_works_out():
    db = from_json(_blocks()[0], "minimal.json")
    graph = load_model(MLP, n_devices=1)
    gg = coarsen(graph, n_devices=1)
    cost = ProfileCostModel(gg, TrainingConfig(), db)
    # mlp: 3 Linear (one shared Gemm signature) + 2 ReLU (one signature) -> all 5 compute ops matched
    assert cost.matched_ops == 5
    linear = next(g.id for g in gg.groups if [graph.ops[i].name for i in g.op_ids] == ["node_linear"])
    cpu = CATALOG["cpu"]
    assert cost.group_fwd_ms(linear, cpu, 3) == pytest.approx(0.10)  # 0.09 + 0.02 x 1/2
    assert cost.group_fwd_ms(linear, cpu, 8) == pytest.approx(0.15)  # 0.11 + 0.02 x 4/2, extrapolated
    assert cost.group_bwd_ms(linear, cpu, 4) == pytest.approx(0.5)
    other = CATALOG["V100-16GB"]  # another device type keeps the roofline
    assert cost.group_fwd_ms(linear, other, 3) == pytest.approx(cost.roofline.group_fwd_ms(linear, other, 3))


# (section, key) -> (deletion path in the complete example, JSON path the error names)
_WHERE = {
    ("Top level", "version"): (("version",), "version"),
    ("Top level", "device_type"): (("device_type",), "device_type"),
    ("ops", "rows"): (("ops", GEMM, "rows"), f'ops["{GEMM}"].rows'),
    ("ops", "fwd_ms"): (("ops", GEMM, "fwd_ms"), f'ops["{GEMM}"].fwd_ms'),
    ("groups", "ops"): (("groups", 0, "ops"), "groups[0].ops"),
    ("groups", "rows"): (("groups", 0, "rows"), "groups[0].rows"),
    ("groups", "fwd_ms"): (("groups", 0, "fwd_ms"), "groups[0].fwd_ms"),
    ("groups", "bwd_ms"): (("groups", 0, "bwd_ms"), "groups[0].bwd_ms"),
    **{("contention", k): (("contention", k), f"contention.{k}")
       for k in ("ranks", "rows", "handoff_ms", "alone_stretch", "together_stretch", "together_speed")},
    ("step", "optimizer"): (("step", "optimizer"), "step.optimizer"),
    ("step", "rows"): (("step", "rows"), "step.rows"),
    ("step", "groups[i].ops"): (("step", "groups", 0, "ops"), "step.groups[0].ops"),
    ("step", "groups[i].fwd_ms"): (("step", "groups", 0, "fwd_ms"), "step.groups[0].fwd_ms"),
    ("step", "groups[i].bwd_ms"): (("step", "groups", 0, "bwd_ms"), "step.groups[0].bwd_ms"),
    ("step", "update_ms"): (("step", "update_ms"), "step.update_ms"),
    ("step", "other_ms"): (("step", "other_ms"), "step.other_ms"),
}


def test_documented_required_keys_are_required():
    marked = required_by_section(PAGE)
    assert {("Top level", "device_type"), ("ops", "fwd_ms"), ("step", "other_ms")} <= set(marked), marked
    complete = _blocks()[1]
    failures = []
    for item in marked:
        assert item in _WHERE, f"docs/{PAGE} marks {item} required; teach this test where it lives"
        path, where = _WHERE[item]
        obj = copy.deepcopy(complete)
        node = obj
        for p in path[:-1]:
            node = node[p]
        del node[path[-1]]
        try:
            from_json(obj, "p.json")
            failures.append(f"{item}: accepted without it")
        except InputError as e:
            if e.where != where:
                failures.append(f"{item}: error names {e.where!r}, expected {where!r}")
    assert not failures, "\n".join(failures)


def test_a_required_key_dropped_exits_2_naming_it(tmp_path, capsys):
    obj = copy.deepcopy(_blocks()[0])
    del obj["ops"][GEMM]["fwd_ms"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(obj))
    assert main(["simulate", MLP, CPU4, "--baseline", "dp-even", "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f'p.json: ops["{GEMM}"].fwd_ms: expected' in err


def test_the_complete_examples_falling_relu_is_read_pooled_as_the_page_says():
    from tag.cost.profile_db import interpolate
    from tag.cost.profile_fit import monotone_db

    db = from_json(_blocks()[1], "complete.json")
    relu = next(p for sig, p in db.ops.items() if sig.startswith("Relu|"))
    assert relu.fwd_ms == [0.006622, 0.006001]  # as the page quotes it, falling
    fit = monotone_db(db).ops[next(s for s in db.ops if s.startswith("Relu|"))]
    assert fit.fwd_ms == pytest.approx([0.0063115, 0.0063115])  # (0.006622 + 0.006001) / 2
    assert interpolate(fit.rows, fit.fwd_ms, 8) == pytest.approx(0.0063115)
    gemm = monotone_db(db).ops[GEMM]
    assert gemm.fwd_ms == db.ops[GEMM].fwd_ms  # rising: read as measured

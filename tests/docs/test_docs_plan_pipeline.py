"""docs/plan.md § stages: the pipelined example is a plan tag reads and simulates, the page documents every pipeline
key and schedule, its worked orders are the schedules' orders, and every pipeline error it shows is the message
`tag simulate` prints, word for word."""

import copy
import json
import os
import sys

import pytest

from tag.cli import main
from tag.strategy.pipeline import SCHEDULES, Pipeline, Stage, stage_order
from tag.strategy.planfile_read import parse_plan
from docs_fences import table_rows, DOCS, ROOT, fences, json_fences

PAGE = "plan.md"


def _text() -> str:
    return open(os.path.join(DOCS, PAGE)).read()


def _pipelined() -> dict:
    """The page's complete example with its pipeline fragment inserted after `buckets` and the decisions' rows as
    the page describes (groups 0-2 on local/0 and local/1, groups 3-4 on local/2 and local/3, 64 rows each)."""
    blocks = [b for b in fences(PAGE, "jsonc") if '"stages"' in b[1]]
    assert len(blocks) == 1, "docs/plan.md should show the pipeline keys in one ```jsonc block"
    fragment = json.loads("{" + blocks[0][1].strip().rstrip(",") + "}")
    example = copy.deepcopy(json_fences(PAGE)[0][1])
    for dec in example["decisions"]:
        dec["rows"] = {"local/0": 64, "local/1": 64} if dec["group"] <= 2 else {"local/2": 64, "local/3": 64}
    plan = {}
    for key, value in example.items():
        plan[key] = value
        if key == "buckets":
            plan.update(fragment)
    for key in ("predicted", "baselines", "search"):
        del plan[key]
    return plan


def _simulate(tmp_path, monkeypatch, capsys, plan) -> tuple[int, str]:
    monkeypatch.chdir(tmp_path)  # the page's messages name the plan as p.json
    (tmp_path / "p.json").write_text(json.dumps(plan))
    example = json_fences(PAGE)[0][1]
    model, topo = (os.path.join(ROOT, example[k]["path"]) for k in ("model", "topology"))
    code = main(["simulate", model, topo, "--plan", "p.json", "--json"])
    return code, capsys.readouterr().err


def test_pipelined_example_reads_and_simulates(tmp_path, monkeypatch, capsys):
    plan = _pipelined()
    strategy, _ = parse_plan(plan, "p.json")
    assert strategy.pipeline == Pipeline((Stage((0, 1, 2), (0, 1)), Stage((3, 4), (2, 3))), 4, "1f1b", 1)
    code, err = _simulate(tmp_path, monkeypatch, capsys, plan)
    assert code == 0, err




def test_every_pipeline_key_and_schedule_is_documented():
    text = _text()
    for key in ("`stages`", "`stages[i].groups`", "`stages[i].devices`", "`micro_batches`", "`schedule`", "`k`"):
        assert f"| {key} |" in text, key
    for schedule in SCHEDULES:
        assert f"- `{schedule}`" in text, schedule
    assert "[jB/m, (j+1)B/m)" in text and "rows[d] / m" in text


def test_worked_orders_are_the_schedules_orders():
    rows = table_rows(PAGE, "schedule")
    assert [r[0] for r in rows] == ["gpipe", "1f1b", "kfkb, k = 2"]
    for name, *orders in rows:
        schedule, k = (name.split(",")[0], int(name.split("=")[1])) if "k =" in name else (name, 1)
        for s, text in enumerate(orders):
            assert stage_order(schedule, k, 2, s, 4) == [(p[0], int(p[1:])) for p in text.split()], (name, s)


def _stage(s, **fields):
    return lambda p: p["stages"][s].update(fields)


def _rows(i, rows):
    return lambda p: p["decisions"][i].update(rows=rows)


def _cyclic(p):
    p["stages"] = [{"groups": [0, 1, 3], "devices": ["local/0", "local/1"]},
                   {"groups": [2, 4], "devices": ["local/2", "local/3"]}]
    for dec in p["decisions"]:
        dec["rows"] = {"local/0": 64, "local/1": 64} if dec["group"] in (0, 1, 3) else {"local/2": 64, "local/3": 64}


# the page's "pipeline mistake" column -> the change to the pipelined example
MISTAKES = {
    "a group in no stage": _stage(1, groups=[3]),
    "a group in two stages": _stage(1, groups=[2, 3, 4]),
    "a device in two stages": _stage(1, devices=["local/1", "local/2", "local/3"]),
    "a stage device the topology lacks": _stage(1, devices=["local/2", "m9/0"]),
    "an empty stage": _stage(1, groups=[]),
    "a stage without devices": _stage(1, devices=[]),
    "a cyclic cut (groups 0, 1, 3 then 2, 4)": _cyclic,
    "rows on a device outside the group's stage": _rows(3, {"local/1": 32, "local/2": 64, "local/3": 32}),
    "rows not a multiple of `micro_batches`": _rows(3, {"local/2": 66, "local/3": 62}),
    "`micro_batches` above a replica's rows": lambda p: p.update(micro_batches=128),
    "`micro_batches` below 1 or not an integer": lambda p: p.update(micro_batches=2.5),
    "`micro_batches` without `stages`": lambda p: p.pop("stages"),
    "an unknown schedule": lambda p: p.update(schedule="interleaved"),
    "`k` below 1": lambda p: p.update(schedule="kfkb", k=0),
    "`k` not dividing `micro_batches`": lambda p: p.update(schedule="kfkb", k=3),
    "`k` above 1 without `kfkb`": lambda p: p.update(k=2),
}
# needs a model with training-mode BatchNormalization (the last test)
ELSEWHERE = {"training-mode BatchNormalization with micro-batches"}


def test_every_documented_pipeline_error_is_the_printed_message(tmp_path, monkeypatch, capsys):
    rows = table_rows(PAGE, "pipeline mistake")
    assert {r[0] for r in rows} == set(MISTAKES) | ELSEWHERE
    for mistake, message in rows:
        if mistake in ELSEWHERE:
            continue
        plan = _pipelined()
        MISTAKES[mistake](plan)
        code, err = _simulate(tmp_path, monkeypatch, capsys, plan)
        assert code == 2 and err.count("\n") == 1, (mistake, err)
        assert err.strip() == message.strip("`"), mistake


def test_batchnorm_message_is_the_printed_message(tmp_path, monkeypatch, capsys):
    """On the strategy tests' model with training-mode BatchNormalization 'bn' and their 4-micro-batch pipeline."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "strategy"))
    from test_pipeline_plan import B, TOPO, _write_model, base_strategy  # noqa: E402
    from tag.graph import load_model
    from tag.strategy import TrainingConfig
    from tag.strategy.planfile import plan_to_json
    from tag.strategy.regroup import groupgraph_from_partition
    from tag.topology import parse_topology

    monkeypatch.chdir(tmp_path)
    _write_model("bn.onnx", batchnorm=True)
    with open("topo.json", "w") as f:
        json.dump(TOPO, f)
    graph = load_model("bn.onnx", batch_size=B)
    gg = groupgraph_from_partition(graph, [[0, 1], [2], [3]])
    plan = plan_to_json(base_strategy(), gg, parse_topology(TOPO, "topo.json"), TrainingConfig(), "bn.onnx",
                        "topo.json")
    with open("p.json", "w") as f:
        json.dump(plan, f)
    assert main(["simulate", "bn.onnx", "topo.json", "--plan", "p.json"]) == 2
    message = dict(table_rows(PAGE, "pipeline mistake"))["training-mode BatchNormalization with micro-batches"]
    assert capsys.readouterr().err.strip() == message.strip("`")

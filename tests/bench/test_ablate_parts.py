"""`tag bench --ablate --parts`: some columns per run; lines of one case's parts by the same commit read as one case
(tag.bench.ablate_results.merge_parts, parts_to_plan; tag.cli._bench_ablate)."""

import json
import math

import pytest

import tag.bench.ablate_results as results_mod
from tag.bench.ablate import PARTS, AblationCase
from tag.bench.ablate_results import append_result, parts_to_plan, read_results, same_code
from tag.cli import main

GRID = ["bench", "--ablate", "--models", "mlp", "--topologies", "cpu4", "--playouts", "2", "--simulations", "20"]


def _case(commit, ms, **kw):
    parts = list(ms)
    return AblationCase("mlp", "cpu4", ms=dict(ms), bound_ms=kw.get("bound", 2.0), precision="fp32",
                        batch_size=128, commit=commit, simulations={p: 10 * (i + 1) for i, p in enumerate(parts)},
                        seconds={p: 0.5 for p in parts}, capped={p: False for p in parts},
                        starts={p: "dp-even" for p in parts}, paths={p: "data / keep" for p in parts if "tree" in p})


def test_lines_of_one_commit_make_one_case_in_the_tables_order(tmp_path):
    path = str(tmp_path / "r.jsonl")
    append_result(path, _case("abc1234", {"full": 4.0, "start": 8.0}))
    append_result(path, _case("abc1234", {"tree (GNN)": 6.0, "start+refine": 5.0}, bound=2.5))
    (case,) = read_results(path)
    assert list(case.ms) == ["start", "start+refine", "tree (GNN)", "full"]  # PARTS order, not file order
    assert case.ms == {"start": 8.0, "start+refine": 5.0, "tree (GNN)": 6.0, "full": 4.0}
    assert case.simulations == {"start": 20, "start+refine": 20, "tree (GNN)": 10, "full": 10}
    assert case.paths == {"tree (GNN)": "data / keep"} and case.bound_ms == 2.5  # the later line's bound


def test_a_later_line_wins_its_own_parts():
    earlier = _case("abc1234", {"start": 8.0, "full": 4.0})
    later = _case("abc1234", {"full": 3.0})
    merged = results_mod.merge_parts(earlier, later)
    assert merged.ms == {"start": 8.0, "full": 3.0} and merged.simulations == {"start": 10, "full": 10}


@pytest.mark.parametrize("first, second", [("abc1234", "def5678"), ("abc1234+dirty", "abc1234+dirty"),
                                           (None, None)])
def test_lines_of_other_code_replace_the_case(tmp_path, first, second):
    path = str(tmp_path / "r.jsonl")
    append_result(path, _case(first, {"start": 8.0, "full": 4.0}))
    append_result(path, _case(second, {"start+refine": 5.0}))
    (case,) = read_results(path)
    assert case.ms == {"start+refine": 5.0}
    assert not same_code(first, second)


def test_a_failed_line_is_not_merged_into():
    failed = AblationCase("mlp", "cpu4", error="ValueError: x", commit="abc1234")
    later = _case("abc1234", {"start": 8.0})
    assert results_mod.merge_parts(failed, later).ms == {"start": 8.0}
    assert results_mod.merge_parts(later, AblationCase("mlp", "cpu4", error="E", commit="abc1234")).ms == {}


def test_which_parts_a_run_plans():
    held = _case("abc1234", {"start": 8.0, "full": 4.0})
    assert parts_to_plan(None, PARTS, "abc1234") == PARTS
    assert parts_to_plan(held, ("start", "full"), "def5678") == ()  # held, whatever the code
    assert parts_to_plan(held, PARTS, "abc1234") == ("start+refine", "tree (uniform)", "tree (GNN)", "tree+refine")
    assert parts_to_plan(held, ("start", "tree+refine"), "def5678") == ("start", "tree+refine")  # other code: all
    assert parts_to_plan(held, ("tree+refine",), "abc1234+dirty") == ("tree+refine",)
    assert parts_to_plan(AblationCase("mlp", "cpu4", error="E"), PARTS, "abc1234") == ()


def test_a_run_plans_only_the_parts_the_file_lacks(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(results_mod, "code_commit", lambda: "abc1234")
    results = str(tmp_path / "r.jsonl")
    assert main([*GRID, "--parts", "start", "--results", results]) == 0
    err = capsys.readouterr().err
    assert "(parts: start)" in err and "ablate 1/1: mlp on cpu4" in err and ": start " in err
    assert set(json.loads(open(results).read().splitlines()[0])["ms"]) == {"start"}
    # start and start+refine: only start+refine is planned, the file's start is kept, one case in the tables
    assert main([*GRID, "--parts", "start+refine,start", "--results", results, "--json"]) == 0
    out, err = capsys.readouterr()
    lines = open(results).read().splitlines()
    assert len(lines) == 2 and set(json.loads(lines[1])["ms"]) == {"start+refine"}
    (case,) = json.loads(out)["cases"]
    assert list(case["ms"]) == ["start", "start+refine"] and all(math.isfinite(float(v)) for v in case["ms"].values())
    assert case["ms"]["start+refine"] <= case["ms"]["start"]  # refinement only keeps what is faster
    # all held: nothing to run
    assert main([*GRID, "--parts", "start+refine", "--results", results]) == 0
    assert "1 already in" in capsys.readouterr().err and len(open(results).read().splitlines()) == 2


def test_bad_parts_are_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as e:
        main([*GRID, "--parts", "start,tree"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--parts: expected comma-separated parts of: start, start+refine" in err and "found 'tree'" in err
    assert main(["bench", "--parts", "start", "--models", "mlp", "--topologies", "cpu4"]) == 2
    assert "--parts: without --ablate" in capsys.readouterr().err

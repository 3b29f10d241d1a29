"""`tag bench --ablate --results F.jsonl`: cases appended as they finish, a re-run skips them, tables from the file,
a corrupt line is a one-line error (tag.bench.ablate_results, tag.cli._bench_ablate)."""

import json
import math

import pytest

from tag.bench.ablate import AblationCase, AblationSettings, command_line, run_ablation
from tag.bench.ablate_results import append_result, case_record, read_results
from tag.cli import main

GRID = ["bench", "--ablate", "--models", "mlp", "--topologies", "cpu4", "--playouts", "2", "--simulations", "20"]


def _lines(path) -> list[str]:
    with open(path) as f:
        return f.read().splitlines()


def test_a_rerun_skips_the_cases_the_file_holds(tmp_path, capsys):
    results = str(tmp_path / "r.jsonl")
    # mlp x {cpu4, random-1}: 2 cases, none in the file yet
    assert main([*GRID, "--random", "1", "--results", results]) == 0
    err = capsys.readouterr().err
    assert "2 cases, 0 already in" in err and "ablate 1/2: mlp on cpu4" in err and "ablate 2/2: mlp on random-1" in err
    first = _lines(results)
    assert [json.loads(line)["topology"] for line in first] == ["cpu4", "random-1"]
    # --random 2 adds mlp on random-2: 3 cases, 2 in the file, 1 planned and appended; the 2 lines stay as they were
    assert main([*GRID, "--random", "2", "--results", results, "--json"]) == 0
    out, err = capsys.readouterr()
    assert "3 cases, 2 already in" in err and "1 to run" in err and "ablate 1/1: mlp on random-2" in err
    lines = _lines(results)
    assert lines[:2] == first and len(lines) == 3
    # the tables come from the file: all 3 cases, though this run planned one
    assert [(c["model"], c["topology"]) for c in json.loads(out)["cases"]] == \
        [("mlp", "cpu4"), ("mlp", "random-1"), ("mlp", "random-2")]
    # other settings are other cases: --simulations 30 plans mlp on cpu4 again, beside the first
    assert main(["bench", "--ablate", "--models", "mlp", "--topologies", "cpu4", "--playouts", "2",
                 "--simulations", "30", "--results", results, "--json"]) == 0
    out, err = capsys.readouterr()
    assert "1 cases, 0 already in" in err and len(_lines(results)) == 4
    settings = [c["settings"]["simulations"] for c in json.loads(out)["cases"]]
    assert settings == [20, 20, 20, 30]


def test_render_only_plans_nothing_and_lists_the_missing_cases(tmp_path, capsys):
    results = tmp_path / "r.jsonl"
    case = AblationCase("mlp", "cpu4", ms={"start": 8.0, "start+refine": 4.0, "tree (uniform)": 8.0,
                                           "tree (GNN)": 8.0, "tree+refine": 4.0, "full": 4.0},
                        bound_ms=2.0, precision="fp32", batch_size=128, settings=AblationSettings(batch_size=128))
    append_result(str(results), case)
    code = main(["bench", "--ablate", "--models", "mlp", "small_cnn", "--topologies", "cpu4", "--results",
                 str(results), "--render-only"])
    out = capsys.readouterr().out
    assert code == 0 and len(_lines(results)) == 1
    row = next(line for line in out.splitlines() if line.startswith("| mlp on cpu4"))
    assert row.split(" | ")[1:5] == ["128", "--batch-size 128", "8.00", "4.00"]
    assert "Not run yet (1): small_cnn on cpu4" in out
    # start 8 -> full 4 and start+refine 4 -> tree+refine 4: 2x and 1x, headroom 8 / 2 - 1 = 300 %
    assert "full over start: 2.000x geomean over 1 cases" in out
    assert "tree+refine over start+refine, on the 1 cases with >= 20% headroom over the bound: 1.000x" in out
    # only the grid asked for: small_cnn alone holds none of F's cases
    assert main(["bench", "--ablate", "--models", "small_cnn", "--topologies", "cpu4", "--results", str(results),
                 "--render-only", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["cases"] == [] and obj["missing"] == ["small_cnn on cpu4"]


def test_render_only_computes_missing_floors_and_leaves_unknown_clusters_blank(tmp_path, capsys):
    """Files written before the latency floor: rendering computes it where the case's files resolve (mlp on cpu4),
    and leaves "-" where they do not (a cluster imported elsewhere), without failing."""
    results = tmp_path / "r.jsonl"
    ms = {"start": 8.0, "start+refine": 4.0, "tree (uniform)": 8.0, "tree (GNN)": 8.0, "tree+refine": 4.0,
          "full": 4.0}
    for topo in ("cpu4", "elsewhere10"):
        append_result(str(results), AblationCase("mlp", topo, ms=dict(ms), bound_ms=2.0, precision="fp32",
                                                 batch_size=128))
    with open(results) as f:
        assert all("floor_ms" in json.loads(line) for line in f)  # written, as nan ("nan")
    assert main(["bench", "--ablate", "--results", str(results), "--render-only"]) == 0
    out = capsys.readouterr().out
    cells = {line.split(" | ")[0]: line.split(" | ") for line in out.splitlines() if line.startswith("| mlp on")}
    known, unknown = cells["| mlp on cpu4 (fp32)"], cells["| mlp on elsewhere10 (fp32)"]
    assert float(known[11]) > 0 and unknown[11] == "-"  # the latency floor column
    assert "on the 1 of 1 cases with a latency floor" in out


@pytest.mark.parametrize("bad, found", [("not json\n", "invalid JSON"), ('{"format": "other"}\n', "'other'"),
                                        ('{"format": "tag-ablate-case-v1", "model": "mlp"}\n', "KeyError")])
def test_a_corrupt_line_is_a_one_line_error_naming_file_and_line(tmp_path, capsys, bad, found):
    results = tmp_path / "r.jsonl"
    append_result(str(results), AblationCase("mlp", "cpu4", ms={"start": 1.0}, bound_ms=0.5))
    with open(results, "a") as f:
        f.write(bad)
    assert main([*GRID, "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{results}: line 2: expected one JSON object per line" in err and found in err
    assert len(_lines(results)) == 2  # nothing planned, nothing appended


def test_records_round_trip_with_oom_and_missing_times(tmp_path):
    path = str(tmp_path / "r.jsonl")
    case = AblationCase("m", "random-3", ms={"start": math.inf, "full": 2.5}, bound_ms=math.nan,
                        simulations={"full": 7}, seconds={"full": 0.5}, capped={"full": True}, precision="bf16",
                        settings=AblationSettings(None, "momentum", 8, 100, 1), batch_size=64, random_seed=3,
                        commit="abc1234", starts={"full": "dp-balanced"}, paths={"full": "data / keep"})
    append_result(path, case)
    text = _lines(path)[0]
    assert "Infinity" not in text and "NaN" not in text  # strict JSON
    (back,) = read_results(path)
    assert back.ms["start"] == math.inf and math.isnan(back.bound_ms)
    assert case_record(back) == case_record(case)


def test_ablate_only_flags(capsys):
    assert main(["bench", "--results", "r.jsonl", "--models", "mlp", "--topologies", "cpu4"]) == 2
    assert "--results: without --ablate" in capsys.readouterr().err
    assert main(["bench", "--ablate", "--render-only", "--models", "mlp"]) == 2
    assert "--render-only: without --results" in capsys.readouterr().err


def test_batch_size_and_optimizer_reach_the_plan_command(tmp_path, capsys):
    model, topo = "datasets/models/mlp.onnx", "datasets/topologies/cpu4.json"
    line = command_line("start", model, topo, None, 0, None, 64, "momentum")
    assert line == (f"tag plan {model} {topo} --batch-size 64 --optimizer momentum "
                    "--playouts 0 --no-refine --no-sfb --seed 0")
    case = run_ablation(model, topo, batch_size=64, optimizer="momentum", parts=("start",))
    assert case.batch_size == 64 and case.settings.label() == "--batch-size 64 --optimizer momentum"
    assert main(["plan", *line.split()[2:], "--json", "-o", str(tmp_path / "p.json")]) == 0
    capsys.readouterr()
    with open(tmp_path / "p.json") as f:
        p = json.load(f)
    assert p["model"]["batch_size"] == 64 and p["training"]["optimizer"] == "momentum"
    assert p["predicted"]["iteration_ms"] == pytest.approx(case.ms["start"], abs=1e-4)


def test_a_case_with_one_column_renders_no_ratio(tmp_path, capsys):
    """A case planned for `start` only (as `--parts start` leaves it) has no pair of columns for any ratio: the
    summary says so instead of printing nan."""
    results = tmp_path / "r.jsonl"
    append_result(str(results), AblationCase("mlp", "cpu4", ms={"start": 8.0}, bound_ms=2.0, precision="fp32",
                                             batch_size=128, settings=AblationSettings(batch_size=128)))
    assert main(["bench", "--ablate", "--models", "mlp", "--topologies", "cpu4", "--results", str(results),
                 "--render-only"]) == 0
    out = capsys.readouterr().out
    assert "- full over start: no case has both columns yet" in out
    assert "- tree (GNN) over tree (uniform): no case has both columns yet" in out
    assert "headroom over the bound: no case has both columns yet" in out
    assert "nan" not in out

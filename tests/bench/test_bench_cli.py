"""`tag bench` at the front door: bad input exits 2 with one line before any work."""

import os

from tag.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(capsys, *argv):
    code = main(["bench", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_bad_out_path_exits_2_in_one_line(capsys):
    code, out, err = _run(capsys, "--quick", "--out", "/nonexistent/dir/r.md")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--out" in err


def test_unknown_model_exits_2_in_one_line(capsys):
    code, out, err = _run(capsys, "--models", "no_such", "--topologies", "cpu4",
                          "--datasets", os.path.join(ROOT, "datasets"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "no_such" in err


def test_missing_datasets_dir_names_it(capsys, tmp_path):
    code, _, err = _run(capsys, "--models", "mlp", "--datasets", str(tmp_path / "nowhere"))
    assert code == 2 and err.count("\n") == 1 and "nowhere" in err


def test_suite_flags_with_published_exit_2(capsys):
    code, _, err = _run(capsys, "--published", "--models", "mlp")
    assert code == 2 and err.count("\n") == 1 and "--models" in err


def test_bad_profile_exits_2_before_any_case(capsys, tmp_path):
    bad = tmp_path / "profile.json"
    bad.write_text("{not json")
    code, out, err = _run(capsys, "--models", "mlp", "--topologies", "cpu4", "--profile", str(bad),
                          "--datasets", os.path.join(ROOT, "datasets"))
    assert code == 2 and out == "" and err.count("\n") == 1 and "profile.json" in err


def test_json_is_one_object_and_out_is_written(capsys, tmp_path):
    import json

    out_md = tmp_path / "r.md"
    code, out, _ = _run(capsys, "--models", "mlp", "--topologies", "cpu4", "--playouts", "2", "--json",
                        "--out", str(out_md), "--datasets", os.path.join(ROOT, "datasets"))
    obj = json.loads(out)  # exactly one JSON document on stdout
    assert code == 0 and set(obj) == {"cases", "summary"}
    (case,) = obj["cases"]
    ms = case["iteration_ms"]
    assert case["speedup_over_dp_even"]["ps"] == ms["dp-even"] / ms["ps"]
    text = out_md.read_text()
    assert "| mlp | cpu4 |" in text and f"{ms['dp-even']:.1f}" in text
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]  # no temporary file left behind

"""Output paths: checked before any work (exit 2, one line naming the flag and the path), never an input, and
written atomically (a write that fails part-way leaves the old file and no temporary file)."""

import json
import os

import pytest

from tag.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "datasets/models/mlp.onnx")
TOPO = os.path.join(ROOT, "datasets/topologies/cpu4.json")


@pytest.fixture
def no_work(monkeypatch):
    """Every first step of real work raises: a verb that gets past its output checks exits 1, not 2."""
    import tag.gnn.train
    import tag.graph
    import tag.profile.links
    import tag.search.planner
    import tag.sim
    import tag.topology

    def boom(*a, **k):
        raise AssertionError("work started before the output path was checked")

    for mod, name in [(tag.topology, "load_topology"), (tag.topology, "random_topology"), (tag.topology, "import_metis"),
                      (tag.graph, "load_model"), (tag.search.planner, "plan"), (tag.sim, "simulate"),
                      (tag.gnn.train, "train"), (tag.gnn.train, "topology_sources"),
                      (tag.profile.links, "launch_local")]:
        monkeypatch.setattr(mod, name, boom)


def _exit2_one_line(capsys, argv, *words):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_missing_directory_is_refused_before_any_work(tmp_path, capsys, no_work):
    bad = str(tmp_path / "no" / "such" / "dir" / "p.json")
    verbs = [
        (["plan", MODEL, TOPO, "--no-gnn", "-o", bad], "-o/--output"),
        (["plan", MODEL, TOPO, "--no-gnn", "--trace", bad], "--trace"),
        (["simulate", MODEL, TOPO, "--baseline", "dp-even", "--trace", bad], "--trace"),
        (["topo", "random", "--seed", "1", "-o", bad], "-o/--output"),
        (["topo", "import", TOPO, "-o", bad], "-o/--output"),
        (["profile", "ops", MODEL, "-o", bad], "-o/--output"),
        (["profile", "links", "--nproc", "2", "-o", bad], "-o/--output"),
        (["train", "--models", MODEL, "--topologies", "random:2", "-o", bad], "-o/--output"),
    ]
    for argv, flag in verbs:
        line = _exit2_one_line(capsys, argv, flag, bad, "no directory")
        assert line.startswith(f"tag {argv[0]}: error: "), line


def test_output_that_is_an_input_is_refused(tmp_path, capsys, no_work):
    topo = tmp_path / "t.json"
    topo.write_text(open(TOPO).read())
    same = str(tmp_path / "." / "t.json")
    _exit2_one_line(capsys, ["plan", MODEL, str(topo), "-o", same], "-o/--output", "the input")
    _exit2_one_line(capsys, ["simulate", MODEL, str(topo), "--baseline", "ps", "--trace", same], "--trace", "the input")
    _exit2_one_line(capsys, ["topo", "import", str(topo), "-o", same], "the input")
    assert topo.read_text() == open(TOPO).read()


def test_two_outputs_on_one_path_are_refused(tmp_path, capsys, no_work):
    p = str(tmp_path / "x.json")
    _exit2_one_line(capsys, ["plan", MODEL, TOPO, "-o", p, "--trace", p], "--trace", "-o/--output")


def test_failed_write_leaves_old_plan_and_no_temp_file(tmp_path, capsys, monkeypatch):
    import tag.fileio

    out = tmp_path / "p.json"
    out.write_text("old plan\n")

    def fsync_fails(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tag.fileio.os, "fsync", fsync_fails)
    assert main(["plan", MODEL, TOPO, "--baseline", "dp-even", "-o", str(out)]) == 1
    assert "No space left" in capsys.readouterr().err
    assert out.read_text() == "old plan\n"
    assert os.listdir(tmp_path) == ["p.json"]
    monkeypatch.undo()
    assert main(["plan", MODEL, TOPO, "--baseline", "dp-even", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["search"]["method"] == "baseline:dp-even"
    assert os.listdir(tmp_path) == ["p.json"]


def test_failed_write_leaves_old_topology_trace_and_profile(tmp_path, capsys, monkeypatch):
    import tag.fileio

    def fsync_fails(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tag.fileio.os, "fsync", fsync_fails)
    olds = {}
    for argv in (["topo", "random", "--seed", "2", "-o"],
                 ["simulate", MODEL, TOPO, "--baseline", "dp-even", "--trace"],
                 ["profile", "ops", MODEL, "--rows", "1,2", "--repeats", "1", "--warmup", "0", "--no-groups", "-o"]):
        out = tmp_path / f"{argv[0]}.json"
        out.write_text(f"old {argv[0]}\n")
        olds[out.name] = out.read_text()
        assert main(argv + [str(out)]) == 1, argv
        assert "No space left" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == olds  # untouched, no temporary files left

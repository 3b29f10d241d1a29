"""Argument errors are one line, --nproc is at least 1, and every verb and action's --help has a description
and an example."""

import argparse

import pytest

from tag.cli import build_parser, main


def _one_line_error(capsys, argv, prog):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: ") and lines[0].endswith(f"(see {prog} --help)")
    return lines[0]


def test_unknown_verb(capsys):
    line = _one_line_error(capsys, ["frobnicate"], "tag")
    assert "'frobnicate'" in line and "plan" in line


def test_missing_positional(capsys):
    line = _one_line_error(capsys, ["plan", "m.onnx"], "tag plan")
    assert "topology" in line


def test_bad_int_and_bad_choice(capsys):
    line = _one_line_error(capsys, ["plan", "m.onnx", "t.json", "--playouts", "many"], "tag plan")
    assert "--playouts" in line and "'many'" in line
    line = _one_line_error(capsys, ["simulate", "m.onnx", "t.json", "--baseline", "dp-odd"], "tag simulate")
    assert "--baseline" in line and "'dp-odd'" in line


def test_errors_of_an_action_name_the_action(capsys):
    line = _one_line_error(capsys, ["topo", "random", "--seed", "x"], "tag topo random")
    assert "--seed" in line
    line = _one_line_error(capsys, ["profile", "ops"], "tag profile ops")
    assert "model" in line and "--output" in line


def test_unrecognized_argument_is_reported_by_the_verb(capsys):
    line = _one_line_error(capsys, ["inspect", "m.onnx", "--frob"], "tag inspect")
    assert "--frob" in line


@pytest.mark.parametrize("argv,prog", [
    (["deploy", "plan.json", "m.onnx", "--nproc", "0"], "tag deploy"),
    (["deploy", "plan.json", "m.onnx", "--nproc", "-2"], "tag deploy"),
    (["profile", "links", "-o", "x.json", "--nproc", "0"], "tag profile"),
])
def test_nproc_below_one_is_refused_before_any_file_is_read(capsys, argv, prog):
    # plan.json and m.onnx do not exist: the --nproc error must come first
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: --nproc"), err
    assert ">= 1" in lines[0] or "positive integer" in lines[0]


def _walk(parser, path):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, path + [name])


def test_every_verb_and_action_help_has_description_and_example():
    seen = []
    for path, p in _walk(build_parser(), []):
        if not path:
            continue
        seen.append(" ".join(path))
        assert (p.description or "").strip(), f"tag {' '.join(path)}: no description"
        epilog = p.epilog or ""
        assert "example:" in epilog, f"tag {' '.join(path)}: no example"
        examples = epilog.split("example:", 1)[1]
        assert f"tag {path[0]}" in examples, f"tag {' '.join(path)}: example does not run tag {path[0]}"
        if len(path) > 1:
            assert f"tag {' '.join(path)}" in examples
    # the sub-verbs that had no description or example before
    assert {"topo random", "topo import", "profile ops", "profile links"} <= set(seen)


def test_plan_help_documents_the_out_of_memory_exit_code(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert "exit codes:" in out and "3  no strategy fits in memory" in out

"""Every example in every `--help`, in README.md and in docs/*.md runs (issue 19, Must-show 4 and 6).

Sources: the `example:` block of the epilog of every verb and sub-verb reachable from `tag.cli.build_parser()`
(the lines up to the first blank line), the `tag ...` lines of README.md's code fences, the example column of
its verb table, and the `tag ...` lines of the ```bash fences of docs/*.md. A verb or sub-verb whose `--help`
has no example line starting with its own command fails the test.

Each example runs in-process through `tag.cli.main` in a fresh temporary directory holding:
`datasets` (a link to the repository's), the placeholders `M.onnx` / `model.onnx` (datasets/models/mlp.onnx),
`T.json` / `topo.json` (datasets/topologies/cpu4.json), `metis_cluster.json` (the shipped Metis example) and
`plan.json` (`tag plan M.onnx T.json --baseline dp-even`, made once). The lines of one example block (or one
README fence) run in order in the same directory, so `tag profile ops ... -o profile.json` feeds the next
line's `--profile profile.json`; `> FILE` writes the captured stdout to FILE. Every example must exit 0.

Reduced size (so the whole file stays near a minute and a half on two idle cores):
- datasets models other than the tiny ones are replaced by their tiny counterpart of the same structure
  (resnet50 -> resnet_tiny, vgg19 -> small_cnn, ...), except in `tag inspect`, which runs on the real model;
- `tag plan`: `--playouts 4 --no-refine` (unless it writes a baseline);
- `tag deploy`: `--steps 1 --nproc 2` (a pipelined or sharded plan keeps its one rank per device);
- `tag profile ops`: `--rows 1,2 --repeats 1 --warmup 0 --quick --ranks 0` (no contention probe: it starts two
  ranks, about 6 s, and `tests/profile/test_profile_contention.py` runs it);
- `tag profile links`: `--nproc 2 --sizes 4,1K --repeats 1 --warmup 0 --quick`;
- `tag train`: `--topologies random:2 --episodes 1 --trajectories 1` (one episode on two random clusters);
- `tag bench`: **argument parsing only** (the suite plans many models and takes minutes; the bench tests run it).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import re
import shlex
import shutil

import pytest

from tag.cli import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "datasets", "models")

# big datasets model -> the tiny model of the same structure (datasets/models/README.md)
TINY = {"resnet50": "resnet_tiny", "resnet101": "resnet_tiny", "vgg19": "small_cnn", "inception_v3": "inception_tiny",
        "bert_large": "bert_tiny", "gpt2_medium": "gpt2_tiny", "transformer_base": "transformer_tiny",
        "dlrm": "dlrm_tiny", "fc_wide": "mlp"}
SMALL = {"mlp", "small_cnn", "small_transformer", "resnet_tiny", "inception_tiny", "bert_tiny", "gpt2_tiny",
         "transformer_tiny", "dlrm_tiny"}

PLACEHOLDERS = {
    "M.onnx": "datasets/models/mlp.onnx", "model.onnx": "datasets/models/mlp.onnx",
    "T.json": "datasets/topologies/cpu4.json", "topo.json": "datasets/topologies/cpu4.json",
    "metis_cluster.json": "datasets/topologies/metis/metis_cluster.json",
}


# ---- collecting the examples ---------------------------------------------------------------------------------

def _parsers(p: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of `p` and every sub-parser below it."""
    yield path, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, path + (name,))


def _epilog_examples(epilog: str | None) -> list[str]:
    """The `tag ...` lines of an epilog's `example:` block (up to its first blank line)."""
    lines = (epilog or "").split("\n")
    if "example:" not in lines:
        return []
    out = []
    for line in lines[lines.index("example:") + 1:]:
        if not line.strip():
            break
        if line.strip().startswith("tag "):
            out.append(line.strip())
    return out


def help_examples() -> tuple[list[tuple[str, list[str]]], list[str]]:
    """([(label, commands)] one sequence per parser, [commands without an example of their own])."""
    seqs, missing = [], []
    for path, p in _parsers(build_parser()):
        label = " ".join(("tag",) + path)
        cmds = _epilog_examples(p.epilog)
        if not any(c == label or c.startswith(label + " ") for c in cmds):
            missing.append(label)
        if cmds:
            seqs.append((f"{label} --help", cmds))
    return seqs, missing


def _fenced_commands(path: str, langs: tuple[str, ...]) -> list[list[str]]:
    text = open(path).read()
    blocks = re.findall(r"^```(\w*)\s*\n(.*?)^```", text, re.S | re.M)
    return [[ln.strip() for ln in body.splitlines() if ln.strip().startswith("tag ")]
            for lang, body in blocks if lang in langs]


def readme_examples() -> list[tuple[str, list[str]]]:
    """README.md's fenced `tag` lines (one sequence per fence) and its verb table's example column."""
    readme = os.path.join(ROOT, "README.md")
    seqs = [(f"README.md fence {k}", cmds) for k, cmds in enumerate(_fenced_commands(readme, ("bash", "sh", "")))
            if cmds]
    for line in open(readme):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`tag ") and cells[-1].startswith("`tag "):
            seqs.append((f"README.md table {cells[0]}", [cells[-1].strip("`")]))
    return seqs


def docs_examples() -> list[tuple[str, list[str]]]:
    seqs = []
    for page in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        for k, cmds in enumerate(_fenced_commands(page, ("bash", "sh"))):
            if cmds:
                seqs.append((f"docs/{os.path.basename(page)} fence {k}", cmds))
    return seqs


# ---- reducing and running ------------------------------------------------------------------------------------

def _set_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """`flag value` replaced if present, else appended (value None: a switch, added once)."""
    argv = list(argv)
    if value is None:
        return argv if flag in argv else argv + [flag]
    if flag in argv:
        argv[argv.index(flag) + 1] = value
        return argv
    return argv + [flag, value]


def _verb(argv: list[str]) -> tuple[str, ...]:
    return tuple(argv[:2]) if argv and argv[0] in ("topo", "profile") else tuple(argv[:1])


def _pipelined(plan_path: str) -> bool:
    """Whether the plan file in the current directory has pipeline stages or sharded groups (either keeps one rank
    per device of its stages or shard grids)."""
    try:
        with open(plan_path) as f:
            plan = json.load(f)
        return "stages" in plan or any("shard" in d for d in plan.get("decisions", []))
    except (OSError, ValueError):
        return False


def reduce_args(argv: list[str]) -> list[str]:
    """The example's arguments at reduced size (see the module docstring)."""
    verb = _verb(argv)
    if verb != ("inspect",):
        out = []
        for a in argv:
            m = re.fullmatch(r"datasets/models/(\w+)\.onnx", a)
            if m and m.group(1) not in SMALL:
                assert m.group(1) in TINY, f"no tiny counterpart for {a}: add it to TINY"
                a = f"datasets/models/{TINY[m.group(1)]}.onnx"
            out.append(a)
        argv = out
    if verb == ("plan",) and "--baseline" not in argv:
        argv = _set_flag(_set_flag(argv, "--playouts", "4"), "--no-refine", None)
    elif verb == ("deploy",):
        argv = _set_flag(argv, "--steps", "1")
        if not _pipelined(argv[1]):  # a pipelined or sharded plan's ranks: keep its rank count
            argv = _set_flag(argv, "--nproc", "2")
    elif verb == ("profile", "ops"):
        for flag, value in (("--rows", "1,2"), ("--repeats", "1"), ("--warmup", "0"), ("--quick", None),
                            ("--ranks", "0")):
            argv = _set_flag(argv, flag, value)
    elif verb == ("profile", "links"):
        for flag, value in (("--nproc", "2"), ("--sizes", "4,1K"), ("--repeats", "1"), ("--warmup", "0"),
                            ("--quick", None)):
            argv = _set_flag(argv, flag, value)
    elif verb == ("train",):
        if "--topologies" in argv and argv[argv.index("--topologies") + 1].startswith("random:"):
            argv = _set_flag(argv, "--topologies", "random:2")
        argv = _set_flag(_set_flag(argv, "--episodes", "1"), "--trajectories", "1")
    return argv


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """A directory with the placeholder files and a plan.json for M.onnx on T.json."""
    d = tmp_path_factory.mktemp("example_fixtures")
    for name, target in PLACEHOLDERS.items():
        shutil.copy(os.path.join(ROOT, target), d / name)
    with _in_dir(d), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["plan", "M.onnx", "T.json", "--baseline", "dp-even", "-o", "plan.json"])
    assert code == 0, f"making the fixture plan failed: {err.getvalue()}"
    return d


@contextlib.contextmanager
def _in_dir(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _fresh_dir(fixtures, tmp_path, label: str):
    d = tmp_path / re.sub(r"\W+", "_", label).strip("_")
    d.mkdir()
    os.symlink(os.path.join(ROOT, "datasets"), d / "datasets")
    for name in list(PLACEHOLDERS) + ["plan.json"]:
        shutil.copy(fixtures / name, d / name)
    return d


def run_example(line: str) -> tuple[int | str, str]:
    """Run one example line (in the current directory): (exit code, or 'parsed' for parse-only; stderr tail)."""
    words = shlex.split(line)
    assert words[0] == "tag", line
    redirect = None
    if ">" in words:
        k = words.index(">")
        words, redirect = words[:k], words[k + 1]
    argv = reduce_args(words[1:])
    if _verb(argv) == ("bench",):
        parser = build_parser()
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit as e:
            return f"argument error (exit {e.code})", ""
        return ("parsed" if not extra and getattr(args, "_run", None) else f"unparsed {extra}"), ""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse errors
            code = e.code
    if redirect:
        with open(redirect, "w") as f:
            f.write(out.getvalue())
    tail = " | ".join(err.getvalue().strip().splitlines()[-2:])
    return code, tail


def _run_sequences(seqs, fixtures, tmp_path) -> tuple[list[str], int]:
    failures, ran = [], 0
    for label, cmds in seqs:
        d = _fresh_dir(fixtures, tmp_path, label)
        with _in_dir(d):
            for line in cmds:
                code, tail = run_example(line)
                ran += 1
                if code not in (0, "parsed"):
                    failures.append(f"{label}: `{line}` -> exit {code}: {tail}")
    return failures, ran


# ---- the tests -------------------------------------------------------------------------------------------------

def test_reduce_args_maps_big_models_and_sizes():
    assert reduce_args(["plan", "datasets/models/resnet50.onnx", "T.json", "--playouts", "200"]) == \
        ["plan", "datasets/models/resnet_tiny.onnx", "T.json", "--playouts", "4", "--no-refine"]
    assert reduce_args(["inspect", "datasets/models/vgg19.onnx"]) == ["inspect", "datasets/models/vgg19.onnx"]
    assert reduce_args(["deploy", "plan.json", "M.onnx", "--steps", "5"]) == \
        ["deploy", "plan.json", "M.onnx", "--steps", "1", "--nproc", "2"]
    for small in SMALL | set(TINY.values()):
        assert os.path.exists(os.path.join(MODELS, f"{small}.onnx")), small


def test_every_verb_has_an_example():
    seqs, missing = help_examples()
    assert not missing, "verbs whose --help has no example of their own: " + ", ".join(missing)
    assert len(seqs) >= 10


def test_every_help_example_runs(fixtures, tmp_path):
    seqs, missing = help_examples()
    failures, ran = _run_sequences(seqs, fixtures, tmp_path)
    failures += [f"{label}: no example in --help" for label in missing]
    assert ran >= 20
    assert not failures, f"{len(failures)} of {ran} --help examples failed:\n" + "\n".join(failures)


def test_every_readme_and_docs_example_runs(fixtures, tmp_path):
    seqs = readme_examples() + docs_examples()
    assert any(label.startswith("README.md table") for label, _ in seqs), "README's verb table was not found"
    failures, ran = _run_sequences(seqs, fixtures, tmp_path)
    assert ran >= 10
    assert not failures, f"{len(failures)} of {ran} README.md / docs examples failed:\n" + "\n".join(failures)

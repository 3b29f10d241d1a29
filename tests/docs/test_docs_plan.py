"""docs/plan.md: its example is a real plan tag simulates as written, and the keys it marks required are required."""

import copy
import hashlib
import json
import os

import pytest

from tag.cli import main
from docs_fences import ROOT, json_fences, required_keys

PAGE = "plan.md"


def _example() -> dict:
    blocks = json_fences(PAGE)
    assert len(blocks) == 1, f"docs/{PAGE} should have exactly one ```json block (the example), has {len(blocks)}"
    return blocks[0][1]


def _files(plan: dict) -> tuple[str, str]:
    return os.path.join(ROOT, plan["model"]["path"]), os.path.join(ROOT, plan["topology"]["path"])


def _simulate(tmp_path, plan: dict, capsys) -> tuple[int, str, str]:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan))
    model, topo = _files(_example())
    code = main(["simulate", model, topo, "--plan", str(path), "--json"])
    out, err = capsys.readouterr()
    return code, out, err


def test_example_names_shipped_files_by_their_real_sha256():
    plan = _example()
    for key, path in zip(("model", "topology"), _files(plan)):
        with open(path, "rb") as f:
            assert plan[key]["sha256"] == hashlib.sha256(f.read()).hexdigest(), key


def test_example_simulates_to_its_recorded_prediction(tmp_path, capsys):
    plan = _example()
    code, out, err = _simulate(tmp_path, plan, capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["iteration_ms"] == pytest.approx(plan["predicted"]["iteration_ms"], abs=1e-3)
    assert res["batch_size"] == plan["model"]["batch_size"] == 128
    # samples/s = batch / iteration time, as the page says: 128 x 1000 / iteration_ms
    assert plan["predicted"]["samples_per_s"] == pytest.approx(128 * 1000 / plan["predicted"]["iteration_ms"], rel=1e-5)
    for dec in plan["decisions"]:
        assert sum(dec["rows"].values()) == 128


def test_documented_optional_keys_are_optional(tmp_path, capsys):
    plan = copy.deepcopy(_example())
    for key in ("training", "predicted", "baselines", "search"):
        del plan[key]
    for dec in plan["decisions"]:
        del dec["server"], dec["sfb"]
    del plan["model"]["input_shapes"]
    code, _, err = _simulate(tmp_path, plan, capsys)
    assert code == 0, err


# documented key -> (path of the deletion in the example, JSON path the error must start with)
_WHERE = {
    "version": (("version",), "version"), "bucket_mb": (("bucket_mb",), "bucket_mb"),
    "buckets": (("buckets",), "buckets"), "buckets[i].mb": (("buckets", 0, "mb"), "buckets[0].mb"),
    "buckets[i].groups": (("buckets", 0, "groups"), "buckets[0].groups"),
    "buckets[i].algorithm": (("buckets", 0, "algorithm"), "buckets[0].algorithm"), "model": (("model",), "model"), "topology": (("topology",), "topology"),
    "groups": (("groups",), "groups"), "decisions": (("decisions",), "decisions"),
    "model.path": (("model", "path"), "model.path"), "model.sha256": (("model", "sha256"), "model.sha256"),
    "model.batch_size": (("model", "batch_size"), "model.batch_size"),
    "topology.path": (("topology", "path"), "topology.path"),
    "topology.sha256": (("topology", "sha256"), "topology.sha256"),
    "groups[i].id": (("groups", 0, "id"), "groups[0].id"), "groups[i].ops": (("groups", 0, "ops"), "groups[0].ops"),
    "decisions[j].group": (("decisions", 0, "group"), "decisions[0].group"),
    "decisions[j].rows": (("decisions", 0, "rows"), "decisions[0].rows"),
}


def test_documented_required_keys_are_required(tmp_path, capsys):
    keys = required_keys(PAGE)
    assert {"version", "model.sha256", "model.batch_size", "decisions[j].rows"} <= set(keys), keys
    failures = []
    for key in keys:
        assert key in _WHERE, f"docs/{PAGE} marks {key!r} required; teach this test where it lives"
        path, where = _WHERE[key]
        plan = copy.deepcopy(_example())
        node = plan
        for p in path[:-1]:
            node = node[p]
        del node[path[-1]]
        code, _, err = _simulate(tmp_path, plan, capsys)
        if code != 2 or err.count("\n") != 1 or f"p.json: {where}" not in err:
            failures.append(f"{key}: exit {code}, {err.strip()!r}")
    assert not failures, "\n".join(failures)


def _documented_keys() -> set[str]:
    """Every key named in the first column of the page's tables, as dotted paths (`decisions.rows`)."""
    keys = set()
    for line in open(os.path.join(ROOT, "docs", PAGE)):
        if line.startswith("| `"):
            first = line.strip().strip("|").split("|")[0]
            for k in first.split(","):
                keys.add(k.strip().strip("`").replace("[i]", "").replace("[j]", ""))
    return keys


NESTED_SEARCH = ("precision", "memory")


def test_every_key_tag_plan_writes_is_documented_and_back(tmp_path, capsys):
    model, topo = _files(_example())
    out = tmp_path / "written.json"
    assert main(["plan", model, topo, "--playouts", "2", "--no-refine", "-o", str(out)]) == 0
    capsys.readouterr()
    written = json.loads(out.read_text())
    documented = _documented_keys()
    paths = set(written)
    for block in ("model", "topology", "predicted"):
        paths |= {f"{block}.{k}" for k in written[block]}
    for k, v in written["search"].items():  # precision and memory document their own keys
        paths |= {f"search.{k}.{kk}" for kk in v} if k in NESTED_SEARCH else {f"search.{k}"}
    paths |= {f"buckets.{k}" for b in written["buckets"] for k in b}
    paths |= {f"decisions.{k}" for k in written["decisions"][0]} | {f"groups.{k}" for k in written["groups"][0]}
    paths |= set(written["training"])  # the training table names its keys bare
    assert not paths - documented, f"written by tag plan but not in docs/{PAGE}: {sorted(paths - documented)}"
    search_doc = {".".join(k.split(".")[:2]) for k in documented if k.startswith("search.")}
    assert search_doc <= {f"search.{k}" for k in written["search"]}, \
        f"documented in docs/{PAGE} but not written: {sorted(search_doc - {f'search.{k}' for k in written['search']})}"
    assert set(_example()["search"]) == set(written["search"])

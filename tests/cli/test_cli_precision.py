"""`--precision` on tag plan / simulate, and the search's own choice (`tag.search.precision`) recorded in plan.json."""

from __future__ import annotations

import json

import pytest

from tag.cli import main
from tag.search.precision import MIN_GAIN, PREFERENCE, auto_precisions
from tag.strategy.planfile_read import read_plan
from tag.topology import load_topology

MODEL = "datasets/models/mlp.onnx"  # 3 x Linear 512 wide: at batch 4096 its matmuls dominate on a GPU


def _topology(tmp_path, name: str, *types: str) -> str:
    topo = {"version": 1, "name": name,
            "machines": [{"name": "m0", "devices": [{"type": t, "count": 2} for t in types]}]}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(topo))
    return str(path)


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("verb", [["plan", "--no-gnn"], ["simulate", "--baseline", "dp-even"]])
def test_bf16_on_v100_exits_2_with_the_documented_line(tmp_path, capsys, verb):
    topo = _topology(tmp_path, "v100", "V100-16GB")
    code, out, err = _run(capsys, verb[0], MODEL, topo, *verb[1:], "--precision", "bf16")
    assert code == 2 and out == ""
    assert err == (f"tag {verb[0]}: error: {topo}: --precision: expected a precision every device supports "
                   "(V100-16GB has no bf16 (Ampere or later GPUs have it); fp32 always works), found 'bf16'\n")


def test_candidates_by_hand(tmp_path):
    """fp32 always; another precision only where every type supports it and the catalog gives it a faster peak:
    V100 fp16 (125 > 15.7 TFLOP/s); A100 tf32, bf16, fp16; a GTX 1080 Ti's fp16 (0.177) is slower, so a cluster
    with one gets fp32 only; CPU ranks support bf16 but have no faster peak for it."""
    def cands(*types):
        return auto_precisions(load_topology(_topology(tmp_path, "t", *types)))
    assert cands("V100-16GB") == ["fp32", "fp16"]
    assert cands("A100-40GB") == ["fp32", "tf32", "bf16", "fp16"]
    assert cands("V100-16GB", "GTX1080Ti-11GB") == ["fp32"]
    assert cands("cpu") == ["fp32"]


def _rule(candidates: dict) -> str:
    """The documented choice, worked out again from plan.json's report: walk PREFERENCE, a later precision replaces
    the current one when it fits where the current does not or is more than MIN_GAIN faster."""
    best = None
    for p in PREFERENCE:
        c = candidates.get(p)
        if c is None:
            continue
        if best is None or (c["fits"] and not candidates[best]["fits"]) or (
                c["fits"] and candidates[best]["fits"]
                and c["best_start_ms"] < candidates[best]["best_start_ms"] * (1 - MIN_GAIN)):
            best = p
    return best


def _plan(capsys, topo: str, out_path, *flags) -> tuple[dict, str]:
    """(plan.json, stdout) of a small `tag plan` run on MODEL (exit 0 asserted)."""
    code, out, err = _run(capsys, "plan", MODEL, topo, "--no-gnn", "--no-sfb", "--simulations", "20", *flags,
                          "-o", str(out_path))
    assert code == 0, err
    return json.loads(out_path.read_text()), out


def test_plan_chooses_a_precision_records_it_and_reads_it_back(tmp_path, capsys):
    topo = _topology(tmp_path, "a100", "A100-40GB")
    out_path = tmp_path / "p.json"
    plan, out = _plan(capsys, topo, out_path, "--batch-size", "4096", "--playouts", "4")
    report = plan["search"]["precision"]
    assert report["by"] == "search" and list(report["candidates"]) == ["fp32", "tf32", "bf16", "fp16"]
    c = report["candidates"]
    # the matmuls run on tensor cores at 156 (tf32) or 312 (16-bit) TFLOP/s instead of 19.5: fp32 loses
    assert c["tf32"]["best_start_ms"] < c["fp32"]["best_start_ms"] * (1 - MIN_GAIN)
    chosen = report["chosen"]
    assert chosen == _rule(c) and chosen != "fp32"
    assert plan["training"]["precision"] == chosen
    assert f"precision {chosen} (chosen by the search)" in out
    strategy, meta = read_plan(str(out_path), load_topology(topo))
    assert meta.training.precision == chosen
    code, out, err = _run(capsys, "simulate", MODEL, topo, "--plan", str(out_path), "--json")
    assert code == 0, err
    sim = json.loads(out)
    assert sim["precision"] == chosen
    assert sim["iteration_ms"] == pytest.approx(plan["predicted"]["iteration_ms"], abs=1e-4)  # written to 4 decimals
    code, out, err = _run(capsys, "simulate", MODEL, topo, "--plan", str(out_path), "--precision", "fp32")
    assert code == 2 and err == (f"tag simulate: error: {out_path}: training.precision: expected --precision fp32 as "
                                 f"given on the command line, found {chosen}\n")


def test_fixed_precision_is_recorded(tmp_path, capsys):
    topo = _topology(tmp_path, "v100", "V100-16GB")
    out_path = tmp_path / "p.json"
    plan, _ = _plan(capsys, topo, out_path, "--playouts", "2", "--precision", "fp16")
    assert plan["training"]["precision"] == "fp16"
    assert plan["search"]["precision"] == {"chosen": "fp16", "by": "--precision"}
    assert set(plan["search"]["memory"]) == {"zero", "recompute", "variants"}
    _, meta = read_plan(str(out_path), load_topology(topo))
    assert meta.training.precision == "fp16"

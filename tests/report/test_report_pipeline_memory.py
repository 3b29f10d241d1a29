"""tag report on a pipelined plan with recomputation, ZeRO and bf16: the pipeline section's stages, rows per
micro-batch and busy times, and the placement's memory decisions, read back from the HTML against the plan as
written here and an independent simulate()."""

import json

import pytest
from conftest import CPU4, MLP
from htmlparse import Page

from tag.cli import main
from tag.modelio import ModelOptions, load_inputs
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.pipeline import Pipeline, Stage
from tag.strategy.planfile import plan_to_json

B = 128
FIRST, SECOND = (64, 64, 0, 0), (0, 0, 64, 64)  # groups 0-2 on local/0-1, groups 3-4 on local/2-3


def _cells(page, row) -> list[str]:
    """Texts of the td elements of table row `row` (those after it, up to the next tr)."""
    els = page.elements[page.elements.index(row) + 1:]
    out = []
    for el in els:
        if el.tag == "tr":
            break
        if el.tag == "td":
            out.append(el.text)
    return out


def _text(page) -> str:
    return " ".join(el.text for el in page.elements)


def _write(tmp_path, strategy, precision) -> tuple[str, str]:
    inp = load_inputs(MLP, CPU4, ModelOptions(batch_size=B))
    training = TrainingConfig(precision=precision)
    plan = plan_to_json(strategy, inp.gg, inp.cluster, training, MLP, CPU4, cost=inp.cost)
    path, html = str(tmp_path / "plan.json"), str(tmp_path / "report.html")
    with open(path, "w") as f:
        json.dump(plan, f)
    assert main(["report", path, MLP, CPU4, "-o", html]) == 0
    with open(html) as f:
        return path, f.read()


@pytest.fixture(scope="module")
def pipelined(tmp_path_factory):
    decs = [Decision(rows=FIRST, sync="ring" if g != 1 else None, recompute=(g == 2)) for g in range(3)]
    decs += [Decision(rows=SECOND, sync="ring" if g == 4 else None) for g in (3, 4)]
    strategy = Strategy(tuple(decs), pipeline=Pipeline((Stage((0, 1, 2), (0, 1)), Stage((3, 4), (2, 3))), 4, "1f1b"))
    path, html = _write(tmp_path_factory.mktemp("pipe"), strategy, "bf16")
    return path, Page(html)


def test_stage_rows_name_groups_devices_and_busy_times(pipelined):
    path, page = pipelined
    stages = page.find("tr", cls="stage")
    assert [(el.attrs["data-groups"], el.attrs["data-devices"]) for el in stages] == [
        ("0 1 2", "local/0 local/1"), ("3 4", "local/2 local/3")]
    cells = [_cells(page, el) for el in stages]
    assert [c[3] for c in cells] == ["16", "16"]  # 64 rows per device over 4 micro-batches
    inp = load_inputs(MLP, CPU4, ModelOptions(), plan_path=path)
    res = simulate(inp.gg, inp.cluster, inp.cost, inp.strategy, inp.training)
    for el, devs in zip(stages, (("local/0", "local/1"), ("local/2", "local/3"))):
        assert float(el.attrs["data-busy-max-ms"]) == pytest.approx(max(res.busy_ms[d] for d in devs), rel=1e-6)
    assert "2 stages, 4 micro-batches, schedule 1f1b" in _text(page)


def test_recompute_and_precision_are_named(pipelined):
    _, page = pipelined
    items = [el.text for el in page.find("li")]
    assert any(t.startswith("g2 (ring, recompute)") for t in items), items
    assert any(t.startswith("g0 (ring)") for t in items), items
    assert "precision bf16" in _text(page)


def test_zero_stage_is_named_and_splits_runs(tmp_path):
    decs = [Decision(rows=(32, 32, 32, 32), sync=None if g % 2 else "ring", zero=2 if g == 0 else 0)
            for g in range(5)]
    _, html = _write(tmp_path, Strategy(tuple(decs)), "fp32")
    page = Page(html)
    assert not page.find("tr", cls="stage")
    summaries = [el.text for el in page.find("summary") if el.text.startswith("group")]
    assert summaries[:2] == ["group 0", "groups 1-4 (4)"]  # equal rows, but group 0 alone has ZeRO 2
    assert any(el.text.startswith("g0 (ring, ZeRO 2)") for el in page.find("li"))

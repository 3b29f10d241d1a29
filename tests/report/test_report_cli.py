"""tag report / tag plan --report from the command line: bad plans exit 2 with one line, 512 devices stay small and
aggregated, the plan verb's report agrees with its plan."""

import json
import os
import shutil
import subprocess

import pytest
from conftest import CPU4, MLP, RESNET_TINY, gpu512_topology
from htmlparse import Page

from tag.cli import main


@pytest.fixture(scope="module")
def mlp_plan(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlp")
    plan, html = str(d / "plan.json"), str(d / "report.html")
    assert main(["plan", MLP, CPU4, "--baseline", "dp-even", "-o", plan, "--report", html, "--json"]) == 0
    return plan, html


def _one_line_exit_2(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tag report: error: "), err
    for n in needles:
        assert n in err, (n, err)
    return err


def test_truncated_plan_is_one_line_exit_2(mlp_plan, tmp_path, capsys):
    bad = tmp_path / "truncated.json"
    bad.write_text(open(mlp_plan[0]).read()[:200])
    out = tmp_path / "r.html"
    _one_line_exit_2(capsys, ["report", str(bad), MLP, CPU4, "-o", str(out)], str(bad))
    assert not out.exists()


def test_plan_of_another_model_is_one_line_exit_2(mlp_plan, tmp_path, capsys):
    out = tmp_path / "r.html"
    _one_line_exit_2(capsys, ["report", mlp_plan[0], RESNET_TINY, CPU4, "-o", str(out)], mlp_plan[0], "sha256")
    assert not out.exists()


def test_output_in_missing_directory_is_one_line_exit_2(mlp_plan, tmp_path, capsys):
    _one_line_exit_2(capsys, ["report", mlp_plan[0], MLP, CPU4, "-o", str(tmp_path / "no" / "r.html")], "-o/--output")


def test_plan_verb_report_matches_its_plan(mlp_plan):
    plan_path, html = mlp_plan
    plan = json.load(open(plan_path))
    page = Page(open(html).read())
    (it,) = page.find("span", id="iteration-ms")
    assert it.text == f"{plan['predicted']['iteration_ms']:.1f} ms"
    # dp-even on 4 identical CPUs: 128 rows / 4 = 32 per device in every group, one column of 4 devices
    assert set(page.placement().values()) == {32}
    (col,) = page.find("th", cls="cls")
    assert col.attrs["data-devices"].split() == ["local/0", "local/1", "local/2", "local/3"]
    names = [el.attrs["data-name"] for el in page.find("div", cls="cmp")]
    assert names[0] == "plan" and set(names[1:]) == set(plan["baselines"])
    for el in page.find("div", cls="cmp")[1:]:
        assert float(el.attrs["data-ms"]) == pytest.approx(plan["baselines"][el.attrs["data-name"]]["iteration_ms"],
                                                           abs=1e-4)


def test_512_devices_small_and_aggregated(tmp_path):
    topo = gpu512_topology(str(tmp_path / "gpu512.json"))
    plan, html = str(tmp_path / "p.json"), str(tmp_path / "r.html")
    assert main(["plan", MLP, topo, "--baseline", "dp-proportional", "-o", plan, "--json"]) == 0
    assert main(["report", plan, MLP, topo, "-o", html, "--json"]) == 0
    size = os.path.getsize(html)
    assert size < 5 * 1024 * 1024
    page = Page(open(html).read())
    p = json.load(open(plan))
    ids = [f"m{i}/{k}" for i in range(64) for k in range(8)]
    # identical devices with identical rows: one column, one timeline block, one memory bar, one machine box
    # (dp-proportional on 512 equal GPUs: 16384 / 512 = 32 rows each in every group)
    assert {r for dec in p["decisions"] for r in dec["rows"].values()} == {32}
    assert all(len(dec["rows"]) == 512 for dec in p["decisions"])
    assert len(page.find("th", cls="cls")) == 1
    assert len(page.find("g", cls="lane")) == 1
    assert len(page.find("div", cls="mem")) == 1
    (box,) = page.find("g", cls="machine")
    assert box.attrs["data-machines"].split() == [f"m{i}" for i in range(64)]
    assert sorted(d for el in page.find("th", cls="cls") for d in el.attrs["data-devices"].split()) == sorted(ids)
    shown = page.placement()
    for dec in p["decisions"]:
        for d in ids:
            assert shown[(dec["group"], d)] == dec["rows"].get(d, 0)
    assert len(page.find("tr", cls="dev")) == 512
    assert len(page.find("tr", cls="link")) == 2 * 512 + 2 * 64


def test_help_has_description_and_example(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert "example:" in out and "tag report plan.json datasets/models/mlp.onnx" in out


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_renders_in_headless_chromium(mlp_plan, tmp_path):
    png = tmp_path / "r.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1400,2000",
                    "file://" + os.path.abspath(mlp_plan[1])], check=True, capture_output=True, timeout=120)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000

"""`tag plan` with a profile that has contention terms writes the finalist `tag deploy` predicts fastest on the
topology's ranks (`tag.cli._plan_deployed`); without them, or with --no-as-deployed, the searched plan.

The figures are checked through a second entry point (`tag simulate --baseline NAME` / `--plan`, which prints the
step as deploy runs it) and by hand: single-device computes alone (concurrency 1), so its deployed step is its
plain iteration x the alone stretch and no handoff delays it; every plan that splits the batch over devices
exchanges messages, and each message here waits a 50 ms handoff, so single-device must win."""

import json
import os

import pytest

from tag.cli import main

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = os.path.join(ROOT, "datasets", "models", "mlp.onnx")
TOPO = os.path.join(ROOT, "datasets", "topologies", "cpu4.json")
TERMS = {"clock": "thread", "ranks": 2, "rows": 8, "handoff_ms": 50.0, "alone_stretch": 1.5, "together_stretch": 2.0,
         "together_speed": 1.2, "cores": 2}
FAST = ["--playouts", "0", "--no-sfb", "--jobs", "1", "--json"]


def _profile(tmp_path, contention):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"version": 1, "device_type": "cpu",
                                **({"contention": contention} if contention else {})}))
    return str(prof)


def _run(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_slow_handoff_picks_single_device(capsys, tmp_path):
    prof = _profile(tmp_path, TERMS)
    out = tmp_path / "plan.json"
    obj = _run(capsys, ["plan", MODEL, TOPO, "--profile", prof, "-o", str(out), *FAST])
    dep = obj["search"]["as_deployed"]
    assert dep["ranks"] == 4 and dep["chosen"] == "single-device"
    assert obj["search"]["method"].endswith("+as-deployed:single-device")
    assert min(dep["step_ms"].values()) == pytest.approx(dep["step_ms"]["single-device"])
    sim = _run(capsys, ["simulate", MODEL, TOPO, "--baseline", "single-device", "--profile", prof, "--json"])
    # by hand: concurrency 1 -> compute x alone_stretch; one device sends no message
    assert dep["step_ms"]["single-device"] == pytest.approx(1.5 * sim["iteration_ms"], rel=1e-3)
    for name in ("dp-even", "ps"):  # the second entry point gives each finalist's figure
        other = _run(capsys, ["simulate", MODEL, TOPO, "--baseline", name, "--profile", prof, "--json"])
        assert dep["step_ms"][name] == pytest.approx(other["as_deployed"]["step_ms"], rel=1e-3)
        assert dep["step_ms"][name] > dep["step_ms"]["single-device"] + 50.0  # at least one handoff later
    written = _run(capsys, ["simulate", MODEL, TOPO, "--plan", str(out), "--json"])
    assert written["as_deployed"]["step_ms"] == pytest.approx(dep["step_ms"]["single-device"], rel=1e-3)
    devices = {d for dec in json.loads(out.read_text())["decisions"] for d in dec["rows"]}
    assert len(devices) == 1


def test_no_flag_keeps_the_searched_plan(capsys, tmp_path):
    prof = _profile(tmp_path, TERMS)
    obj = _run(capsys, ["plan", MODEL, TOPO, "--profile", prof, "--no-as-deployed", *FAST])
    assert obj["search"]["as_deployed"] is None and "as-deployed" not in obj["search"]["method"]
    devices = {d for dec in obj["decisions"] for d in dec["rows"]}
    assert len(devices) > 1  # the simulator's plan splits the batch (messages cost it no handoff)


def test_without_contention_terms_nothing_changes(capsys, tmp_path):
    prof = _profile(tmp_path, None)
    a = _run(capsys, ["plan", MODEL, TOPO, "--profile", prof, *FAST])
    b = _run(capsys, ["plan", MODEL, TOPO, "--profile", prof, "--no-as-deployed", *FAST])
    assert a["search"]["as_deployed"] is None
    assert a["groups"] == b["groups"] and a["predicted"] == b["predicted"]


def test_text_names_the_choice(capsys, tmp_path):
    prof = _profile(tmp_path, TERMS)
    capsys.readouterr()
    assert main(["plan", MODEL, TOPO, "--profile", prof, "--playouts", "0", "--no-sfb", "--jobs", "1"]) == 0
    text = capsys.readouterr().out
    assert "the step tag deploy predicts on 4 ranks of this machine" in text
    assert "wrote single-device" in text
    obj = _run(capsys, ["plan", MODEL, TOPO, "--profile", prof, *FAST])
    head = next(line for line in text.splitlines() if line.startswith("strategy"))
    plan_row = next(line for line in text.splitlines() if line.startswith("plan "))
    assert head.rstrip().endswith("as deployed ms")  # the plan row's last figure: the written plan's deployed step
    assert float(plan_row.split()[-1]) == pytest.approx(obj["search"]["as_deployed"]["step_ms"]["single-device"],
                                                        abs=0.006)


def test_gpu_cluster_ignores_a_cpu_probe(capsys, tmp_path):
    """The contention terms describe CPU ranks sharing this machine's cores: a GPU cluster's plan stays the search's."""
    prof = _profile(tmp_path, TERMS)
    topo = os.path.join(ROOT, "datasets", "topologies", "heterog8.json")
    a = _run(capsys, ["plan", MODEL, topo, "--profile", prof, *FAST])
    b = _run(capsys, ["plan", MODEL, topo, "--profile", prof, "--no-as-deployed", *FAST])
    assert a["search"]["as_deployed"] is None and a["decisions"] == b["decisions"]

"""Must-show 5: `tag plan` twice with the same seed and counts, once idle and once while two busy processes load
both cores, writes byte-identical plan.json files apart from `search.seconds` (the search stops on counts; the
wall-clock cap is far away and does not bind).

The busy loop is bounded: two processes spin for BUSY_S seconds at most and are killed in a `finally`.
"""

import json
import os
import subprocess
import sys

from tag.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "datasets/models/mlp.onnx")
TOPO = os.path.join(ROOT, "datasets/topologies/heterog8.json")
BUSY_S = 300  # upper bound on the busy loop's life; it is killed as soon as the loaded plan is written
FLAGS = ["--playouts", "30", "--simulations", "150", "--seed", "4"]  # GNN and SFB on: every phase runs


def _plan(path) -> str:
    assert main(["plan", MODEL, TOPO, "-o", str(path), *FLAGS]) == 0
    return path.read_text()


def _busy(n: int = 2) -> list[subprocess.Popen]:
    spin = f"import time\nt = time.monotonic() + {BUSY_S}\nwhile time.monotonic() < t:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]


def _without_seconds(text: str) -> list[str]:
    lines = text.splitlines()
    seconds = [i for i, line in enumerate(lines) if line.strip().startswith('"seconds":')]
    assert len(seconds) == 1  # only search.seconds is a time
    return lines[:seconds[0]] + lines[seconds[0] + 1:]


def test_plan_is_byte_identical_idle_and_under_load(tmp_path, capsys):
    idle = _plan(tmp_path / "idle.json")
    procs = _busy()
    try:
        assert all(p.poll() is None for p in procs)  # both spinning while the second plan runs
        loaded = _plan(tmp_path / "loaded.json")
        assert all(p.poll() is None for p in procs)  # ... and still spinning when it is written
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert _without_seconds(idle) == _without_seconds(loaded)
    a = json.loads(idle)["search"]
    # the counts asked for were run in full, nothing was capped, and the GNN guided the tree
    assert a["playouts"] == 30 and a["seed"] == 4 and a["capped"] is False and a["gnn"]
    assert isinstance(a["simulations"], int) and a["simulations"] > 30
    plan = json.loads(idle)
    fits = [b["iteration_ms"] for b in plan["baselines"].values() if not b["oom"]]
    assert plan["predicted"]["iteration_ms"] <= min(fits)


def test_a_binding_cap_is_stated_in_the_plan_and_on_stderr(tmp_path, capsys):
    """--budget 1e-6 s is over before the first playout: nothing of the counted work runs and the plan says so."""
    out = tmp_path / "capped.json"
    assert main(["plan", MODEL, TOPO, "-o", str(out), "--no-gnn", "--budget", "1e-6", *FLAGS]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "safety cap" in line]
    assert len(err) == 1 and "--budget" in err[0]
    search = json.loads(out.read_text())["search"]
    assert search["capped"] is True and search["playouts"] == 0


def test_the_plan_is_the_same_for_every_jobs_count(tmp_path, capsys):
    """--jobs only decides how many processes simulate (`tag.search.prefetch`): one process and three write the
    same plan.json apart from search.seconds."""
    texts = []
    for jobs in ("1", "3"):
        out = tmp_path / f"j{jobs}.json"
        assert main(["plan", MODEL, TOPO, "-o", str(out), "--jobs", jobs, *FLAGS]) == 0
        texts.append(_without_seconds(out.read_text()))
    assert texts[0] == texts[1]
    capsys.readouterr()
    assert main(["plan", MODEL, TOPO, "-o", str(tmp_path / "j0.json"), "--jobs", "0", *FLAGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs" in err[0] and not (tmp_path / "j0.json").exists()

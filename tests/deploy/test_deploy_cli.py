"""`tag deploy` end to end through torchrun: results, plan refusal, launch commands, a killed and a hung rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from tag.cli import main

MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models", "mlp.onnx")
TOPO = {"version": 1, "name": "cpu4", "machines": [
    {"name": "m0", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10},
    {"name": "m1", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10}]}
B = 16


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("deploy_cli")
    topo = d / "cpu4.json"
    topo.write_text(json.dumps(TOPO))
    dp = d / "dp.json"
    assert main(["plan", MODEL, str(topo), "--baseline", "dp-even", "--batch-size", str(B), "-o", str(dp), "--json"]) == 0
    raw = json.loads(dp.read_text())
    # a hybrid: uneven hierarchical rows, a group placed on one device, a ps group with SFB on its Gemm
    gemm = {g["id"]: [o for o in g["ops"] if "linear" in o] for g in raw["groups"]}
    maps = [({"m0/0": 5, "m0/1": 3, "m1/0": 8}, "hierarchical", None),
            ({"m1/1": 16}, None, None),
            ({"m0/0": 4, "m1/0": 12}, "allreduce", None),
            ({"m0/1": 6, "m1/1": 10}, "ps", "m0/1")]
    for dec in raw["decisions"]:
        rows, sync, server = maps[dec["group"] % len(maps)]
        dec.update(rows=rows, sync=sync if gemm[dec["group"]] and len(rows) > 1 else None,
                   server=server if gemm[dec["group"]] and len(rows) > 1 else None,
                   sfb=gemm[dec["group"]] if sync == "ps" else [])
    # written as a version-1 plan (v1 names: hierarchical = the leader form): deploy derives one bucket per group
    raw["version"] = 1
    raw.pop("bucket_mb", None)
    raw.pop("buckets", None)
    hybrid = d / "hybrid.json"
    hybrid.write_text(json.dumps(raw))
    return {"dir": d, "topo": topo, "dp": dp, "hybrid": hybrid, "raw": raw}


def _reference_losses(steps):
    import onnx

    from tag.deploy.data import synthetic_batch
    from tag.deploy.onnx_torch import TorchProgram
    from tag.graph import load_model

    graph = load_model(MODEL, batch_size=B)
    prog = TorchProgram(onnx.load(MODEL), graph, seed=0)
    data, targets = synthetic_batch(graph, B, 0)
    opt = torch.optim.Adam([prog.param(n) for n in prog.param_names], lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        env = prog.run_ops(range(len(graph.ops)), dict(data), B)
        loss = sum(torch.nn.functional.mse_loss(env[t], targets[t]) for t in targets)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _tag(*args, env=None, timeout=300):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "tag.cli", "deploy", *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, timeout=timeout)
    return p, time.monotonic() - t0


def test_two_plans_print_the_single_process_losses(plans):
    ref = _reference_losses(3)
    pred = plans["raw"].get("predicted", {}).get("iteration_ms")
    outs = {}
    for name, nproc in (("dp", 3), ("hybrid", 2)):  # 4 plan devices on 3 ranks (blocks 2+1+1) and on 2
        p, _ = _tag(plans[name], MODEL, "--steps", 3, "--nproc", nproc, "--json")
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["losses"] == pytest.approx(ref, rel=1e-4)
        assert out["measured_step_ms"] > 0 and len(out["step_ms"]) == 3
        assert out["nproc"] == nproc and out["devices"] == 4 and out["batch_size"] == B
        outs[name] = out
    assert outs["dp"]["plan_predicted_ms"] == pytest.approx(json.loads(plans["dp"].read_text())["predicted"]["iteration_ms"])
    assert outs["dp"]["predicted_step_ms"] > 0 and outs["dp"]["prediction"]["ranks"] == 3
    assert outs["dp"]["losses"] == pytest.approx(outs["hybrid"]["losses"], rel=1e-5)
    assert pred is None or pred > 0


def _one_line_error(capsys, argv, code=2):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_plan_that_does_not_match_the_model_is_refused(plans, capsys, tmp_path):
    raw = json.loads(plans["dp"].read_text())
    raw["model"]["sha256"] = "0" * 64
    bad = tmp_path / "badhash.json"
    bad.write_text(json.dumps(raw))
    err = _one_line_error(capsys, ["deploy", str(bad), MODEL, "--topology", str(plans["topo"])])
    assert "model.sha256" in err and str(bad) in err
    raw = json.loads(plans["dp"].read_text())
    raw["groups"][0]["ops"][0] = "no_such_op"
    bad.write_text(json.dumps(raw))
    err = _one_line_error(capsys, ["deploy", str(bad), MODEL])
    assert "groups[0].ops[0]" in err and "no_such_op" in err
    err = _one_line_error(capsys, ["deploy", str(plans["dp"]), MODEL, "--nproc", "5"])
    assert "--nproc" in err


def test_print_launch_one_torchrun_per_machine(plans, capsys):
    assert main(["deploy", str(plans["dp"]), MODEL, "--print-launch", "--steps", "7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m["machine"] for m in out["machines"]] == ["m0", "m1"]
    for i, m in enumerate(out["machines"]):
        cmd = m["command"]
        assert cmd.startswith("torchrun ") and "--nnodes=2" in cmd and f"--node-rank={i}" in cmd
        assert "--nproc-per-node=2" in cmd and "--steps 7" in cmd and "tag.deploy.worker" in cmd


def test_killed_rank_ends_the_run_with_its_error(plans):
    """Rank 1 SIGKILLs itself after step 1 of 50: exit 1, one line naming it, no result, well within time."""
    expect = "rank 1 died: signal SIGKILL"
    p, elapsed = _tag(plans["dp"], MODEL, "--steps", 50, "--nproc", 2, "--timeout", 60,
                      env={"TAG_DEPLOY_FAULT": "1:1:kill"}, timeout=400)
    assert p.returncode == 1
    assert p.stdout == ""  # no partial result
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("tag deploy:")]
    assert len(lines) == 1 and expect in lines[0], p.stderr
    # torchrun notices the dead rank at once: the run ends well inside the 60 s no-progress timeout after
    # start-up (a hang in a gloo collective would otherwise last the group timeout, 130 s)
    assert elapsed < 120

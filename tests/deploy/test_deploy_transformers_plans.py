"""Real multi-group plans of a `transformers` GPT-2 export deploy and train exactly like one process.

A small GPT-2 exported as users do (CPU weights, dynamo, optimize=False, use_cache=False, symbolic batch) is
planned by `tag plan` three ways and each plan runs on 2 gloo ranks (one launch):

- dp-even on two equal CPUs: every splittable group 3:3;
- dp-proportional on a fast and a slow CPU (0.05 and 0.02 TFLOPS): uneven replicas (4:2);
- m-topo: model parallel, the groups' ops split between the two devices, 6 rows each.

Each needs what used to fail with several groups: rows of the [B*S, d] tensors the exporter flattens before
each Gemm are cut as k = S entries per row (tag.deploy.row_slices), the causal mask built from the batch read
off input_ids is batched (tag.graph.batch_values), and no sequence crosses groups (tag.graph.coarsen). Losses
and parameters after 3 momentum steps equal plain full-batch training in one process at rtol 1e-4.
"""

from __future__ import annotations

import json

import onnx
import pytest
import torch

B = 6
FAST_SLOW = {"version": 1,
             "device_types": {"cpu-fast": {"peak_tflops": 0.05, "memory_gb": 8, "memory_bandwidth_gbps": 200},
                              "cpu-slow": {"peak_tflops": 0.02, "memory_gb": 8, "memory_bandwidth_gbps": 100}},
             "machines": [{"name": "m0", "devices": [{"type": "cpu-fast", "count": 1},
                                                     {"type": "cpu-slow", "count": 1}]}]}
EQUAL = {"version": 1, "machines": [{"name": "m0", "devices": [{"type": "cpu", "count": 2}]}]}
PLANS = {"dp-even": (EQUAL, "dp-even"), "dp-proportional": (FAST_SLOW, "dp-proportional"), "m-topo": (EQUAL, "m-topo")}


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    from test_deploy_transformers import export_cpu
    from tag.cli import main

    d = tmp_path_factory.mktemp("hf_plans")
    model = str(d / "gpt2.onnx")
    export_cpu("gpt2", model)
    out = {}
    for name, (topo, baseline) in PLANS.items():
        tp = d / f"{name}_topo.json"
        tp.write_text(json.dumps(topo))
        plan = d / f"{name}.json"
        assert main(["plan", model, str(tp), "--baseline", baseline, "--batch-size", str(B), "-o", str(plan)]) == 0
        out[name] = str(plan)
    return model, out


def make(sc):
    from tag.deploy.job import prepare_job
    from tag.deploy.onnx_torch import TorchProgram

    job = prepare_job(sc["plan"], sc["path"])
    return job.graph, TorchProgram(onnx.load(sc["path"]), job.graph, seed=0), job.groups


def test_plans_are_multi_group_and_of_the_intended_kinds(plans):
    from tag.deploy.job import prepare_job

    model, paths = plans
    rows = {n: [tuple(d.rows) for d in prepare_job(p, model).strategy.decisions] for n, p in paths.items()}
    for n, r in rows.items():
        assert len(r) > 1, n  # several op groups
    assert (3, 3) in rows["dp-even"]
    assert any(a > b > 0 for a, b in rows["dp-proportional"])  # uneven replicas, the fast CPU holding more rows
    assert set(rows["m-topo"]) == {(6, 0), (0, 6)}  # every group on one device, both devices used


def test_gpt2_plans_train_on_two_ranks_like_one_process(plans, tmp_path):
    from _deploy_harness import assert_ranks_match_reference, reference_training, run_scenarios
    from tag.deploy.data import synthetic_batch
    from tag.deploy.job import prepare_job

    model, paths = plans
    scenarios = []
    for name, plan in paths.items():
        job = prepare_job(plan, model)
        scenarios.append({"name": name, "path": model, "plan": plan, "strategy": job.strategy,
                          "machines": job.device_machines, "steps": 3, "optimizer": "momentum", "lr": 0.01})
    results = run_scenarios(2, scenarios, make, str(tmp_path))
    graph, program, _ = make(scenarios[0])
    data, targets = synthetic_batch(graph, B, 0)
    ref_losses, ref_params = reference_training(graph, program, data, targets, 3, "momentum", 0.01)
    assert ref_losses[-1] < ref_losses[0]
    for sc in scenarios:
        assert_ranks_match_reference(results[sc["name"]], ref_losses, ref_params, sc["name"])


def test_row_slices_of_flattened_batch_by_hand():
    from tag.deploy.row_slices import entries_per_row, narrow_rows
    from tag.graph.opgraph import TensorInfo

    flat = TensorInfo("addmm", "float32", (16, 192), 0)  # [B*S, 3d] at a symbolic batch (file batch 1), S = 16
    assert entries_per_row(flat, 1) == 16
    x = torch.arange(6 * 16).reshape(96, 1)  # 6 rows x 16 positions, entry e holds e
    assert narrow_rows(x, flat, 1, 2, 3).flatten().tolist() == list(range(32, 80))  # rows 2..4: entries 32..79
    fixed = TensorInfo("h", "float32", (32, 64), 0)  # the same at a fixed export batch of 2
    assert entries_per_row(fixed, 2) == 16
    per_row = TensorInfo("logits", "float32", (1, 16, 96), 0)
    assert entries_per_row(per_row, 1) == 1 and narrow_rows(x.reshape(6, 16), per_row, 1, 5, 1).tolist() == [
        list(range(80, 96))]

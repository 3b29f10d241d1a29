"""Deployed training on 2-4 gloo ranks equals single-process full-batch training (losses and parameters).

One spawn of 4 ranks runs every plan in turn (starting ranks is the slow part); 4-device plans on fewer
ranks (--nproc) are checked end to end in test_deploy_cli.py. Plans run on a hand-written toy model and on real ONNX
models through the converter (gpt2_tiny: tied embedding/head, integer inputs; mlp: Gemm layers for SFB).
The reference is plain full-batch training with torch.optim, written independently in the harness.
"""

from __future__ import annotations

import os

import pytest
import torch

from tag.deploy.data import synthetic_batch
from tag.strategy import Decision, Strategy
from _deploy_harness import reference_training, run_scenarios
from _deploy_toy import TOY_GROUPS, ToyProgram, toy_graph

B = 12
MACHINES = ["m0", "m0", "m1", "m1"]


def _s(*decs):
    return Strategy(tuple(decs))


def D(rows, sync=None, server=None, sfb=()):
    return Decision(tuple(rows), sync, server, tuple(sfb))


PLANS = {
    "dp_even": _s(*[D((3, 3, 3, 3), "allreduce")] * 4),
    "uneven": _s(*[D((5, 1, 4, 2), "allreduce")] * 4),
    "ps": _s(*[D((3, 3, 3, 3), "ps", server=2)] * 4),
    "hier": _s(*[D((2, 4, 1, 5), "hierarchical")] * 4),
    "placement": _s(D((12, 0, 0, 0)), D((0, 12, 0, 0)), D((0, 0, 12, 0)), D((0, 0, 0, 12))),
    "hybrid": _s(D((6, 6, 0, 0), "allreduce"), D((0, 0, 12, 0)), D((3, 3, 3, 3), "ps", server=0),
                 D((4, 0, 8, 0), "hierarchical")),
    "sfb": _s(D((3, 3, 3, 3), "allreduce"), D((5, 0, 4, 3), "allreduce", sfb=["m2"]), D((3, 3, 3, 3), "allreduce"),
              D((2, 5, 5, 0), "allreduce", sfb=["g4"])),
}


MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models")
REAL_B = 8
REAL_PLANS = {  # 4 coarsened groups each
    "gpt2_tiny": _s(D((4, 4, 0, 0), "allreduce"), D((0, 0, 8, 0)), D((2, 2, 2, 2), "ps", server=1),
                    D((3, 0, 0, 5), "hierarchical")),
    "mlp": None,  # built below: Gemm groups with SFB
}


def _real(name):
    import onnx

    from tag.deploy.onnx_torch import TorchProgram
    from tag.graph import load_model
    from tag.graph.coarsen import coarsen

    path = os.path.join(MODELS, f"{name}.onnx")
    graph = load_model(path, batch_size=REAL_B)
    groups = [list(g.op_ids) for g in coarsen(graph, k=4, n_devices=4).groups]
    return graph, TorchProgram(onnx.load(path), graph, seed=0), groups


def make(sc):
    if sc.get("model", "toy") != "toy":
        return _real(sc["model"])
    graph = toy_graph(B)
    return graph, ToyProgram(graph, seed=0), TOY_GROUPS


def _mlp_sfb_plan(graph, groups):
    """Every group of the mlp on uneven rows, SFB on each Gemm."""
    rows = [(3, 1, 2, 2), (1, 3, 4, 0), (2, 2, 2, 2), (0, 5, 0, 3)]
    decs = []
    for g, ops in enumerate(groups):
        gemms = [graph.ops[i].name for i in ops if graph.ops[i].op_type == "Gemm"]
        decs.append(D(rows[g % 4], "allreduce" if gemms else None, sfb=gemms))
    return Strategy(tuple(decs))


def _scenarios(names, optimizers, steps=3):
    out = []
    for name in names:
        for opt in optimizers:
            lr = 0.05 if opt == "sgd" else 0.01
            out.append({"name": f"{name}-{opt}", "strategy": PLANS[name], "machines": MACHINES,
                        "steps": steps, "optimizer": opt, "lr": lr})
    return out


def _reference(opt, lr, model="toy", steps=3):
    graph, program, _ = make({"model": model})
    data, targets = synthetic_batch(graph, graph.batch_size, 0)
    return reference_training(graph, program, data, targets, steps, opt, lr)


def _check(results, scenarios):
    refs = {}
    for sc in scenarios:
        key = (sc["optimizer"], sc["lr"], sc.get("model", "toy"))
        if key not in refs:
            refs[key] = _reference(*key)
        ref_losses, ref_params = refs[key]
        ranks = results[sc["name"]]
        for r in ranks:
            assert r["losses"] == pytest.approx(ref_losses, rel=1e-4), sc["name"]
        seen = set()
        for r in ranks:
            for n, v in r["params"].items():
                seen.add(n)
                torch.testing.assert_close(v, ref_params[n], rtol=1e-4, atol=1e-6, msg=f"{sc['name']}: {n}")
        assert seen == set(ref_params), sc["name"]
        # training moved the parameters and the loss
        assert ref_losses[-1] < ref_losses[0]


def _real_scenarios():
    graph, _, groups = _real("mlp")
    return [
        # not Adam: the attention key bias has an exactly-zero gradient, whose round-off noise Adam
        # normalises to +-lr, so parameters could not agree to 1e-4 under any summation order
        {"name": "gpt2_tiny-hybrid-momentum", "model": "gpt2_tiny", "strategy": REAL_PLANS["gpt2_tiny"],
         "machines": MACHINES, "steps": 3, "optimizer": "momentum", "lr": 0.01},
        {"name": "mlp-sfb-sgd", "model": "mlp", "strategy": _mlp_sfb_plan(graph, groups),
         "machines": MACHINES, "steps": 3, "optimizer": "sgd", "lr": 0.05},
    ]


def test_four_ranks_all_plans_sgd_and_adam(tmp_path):
    scenarios = _scenarios(list(PLANS), ["sgd", "adam"]) + _real_scenarios()
    results = run_scenarios(4, scenarios, make, str(tmp_path))
    _check(results, scenarios)
    # two different plans print the same losses (data depends only on seed and batch)
    assert results["dp_even-adam"][0]["losses"] == pytest.approx(results["hybrid-adam"][0]["losses"], rel=1e-5)


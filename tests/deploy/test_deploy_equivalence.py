"""Deployed training on 2-4 gloo ranks equals single-process full-batch training (losses and parameters).

One spawn of 4 ranks runs every plan in turn (starting ranks is the slow part); 4-device plans on fewer
ranks (--nproc) are checked end to end in test_deploy_cli.py. Plans run on a hand-written toy model and on real ONNX
models through the converter (gpt2_tiny: tied embedding/head, integer inputs; mlp: Gemm layers for SFB).
The reference is plain full-batch training with torch.optim, written independently in the harness.
"""

from __future__ import annotations

import os

import pytest

from tag.deploy.data import synthetic_batch
from tag.strategy import Bucket, Decision, Strategy
from _deploy_harness import assert_ranks_match_reference, reference_training, run_scenarios
from _deploy_toy import TOY_GROUPS, ToyProgram, toy_graph

B = 12
MACHINES = ["m0", "m0", "m1", "m1"]


def _s(*decs, bucket_mb=0.0, buckets=None):
    return Strategy(tuple(decs), bucket_mb, buckets)


def D(rows, sync=None, server=None, sfb=()):
    return Decision(tuple(rows), sync, server, tuple(sfb))


PLANS = {
    "dp_even": _s(*[D((3, 3, 3, 3), "ring")] * 4),
    "uneven": _s(*[D((5, 1, 4, 2), "ring")] * 4),
    "ps": _s(*[D((3, 3, 3, 3), "ps", server=2)] * 4),
    "leader": _s(*[D((2, 4, 1, 5), "leader")] * 4),
    "placement": _s(D((12, 0, 0, 0)), D((0, 12, 0, 0)), D((0, 0, 12, 0)), D((0, 0, 0, 12))),
    "hybrid": _s(D((6, 6, 0, 0), "ring"), D((0, 0, 12, 0)), D((3, 3, 3, 3), "ps", server=0),
                 D((4, 0, 8, 0), "leader")),
    "sfb": _s(D((3, 3, 3, 3), "ring"), D((5, 0, 4, 3), "ring", sfb=["m2"]), D((3, 3, 3, 3), "ring"),
              D((2, 5, 5, 0), "ring", sfb=["g4"])),
}
# Gradient buckets: every algorithm on uneven rows, one bucket per group (cap 0) and one 25 MiB bucket fusing
# groups 3, 1 and 0 (the toy's groups own 272, 512 and 576 bytes; group 2 has no parameters)
ALGORITHMS = ("ring", "tree", "hierarchical", "leader", "ps")
for _alg in ALGORITHMS:
    for _mb in (0.0, 25.0):
        PLANS[f"b{_mb:g}-{_alg}"] = _s(*[D((5, 1, 4, 2), _alg, server=1 if _alg == "ps" else None)] * 4,
                                       bucket_mb=_mb)
# explicit buckets as a plan file gives them: decisions "auto", the algorithms chosen per bucket
PLANS["explicit"] = _s(*[D((2, 4, 1, 5), "auto")] * 4,
                       buckets=(Bucket((3,), "tree"), Bucket((1, 0), "hierarchical")))
BUCKET_PLANS = [n for n in PLANS if n.startswith("b") or n == "explicit"]


MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "datasets", "models")
REAL_B = 8
REAL_PLANS = {  # 4 coarsened groups each
    "gpt2_tiny": _s(D((4, 4, 0, 0), "ring"), D((0, 0, 8, 0)), D((2, 2, 2, 2), "ps", server=1),
                    D((3, 0, 0, 5), "leader")),
    # data parallel in 25 MiB buckets (all of gpt2_tiny's own gradients in one), the NCCL hierarchical form
    "gpt2_tiny-b25": _s(*[D((3, 1, 2, 2), "hierarchical")] * 4, bucket_mb=25.0),
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
        decs.append(D(rows[g % 4], "ring" if gemms else None, sfb=gemms))
    return Strategy(tuple(decs))


def _scenarios(names, optimizers, steps=3):
    out = []
    for name in names:
        for opt in (["sgd"] if name in BUCKET_PLANS else optimizers):
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
        assert_ranks_match_reference(results[sc["name"]], ref_losses, ref_params, sc["name"])
        # training moved the parameters and the loss
        assert ref_losses[-1] < ref_losses[0]


def _real_scenarios():
    graph, _, groups = _real("mlp")
    return [
        # not Adam: the attention key bias has an exactly-zero gradient, whose round-off noise Adam
        # normalises to +-lr, so parameters could not agree to 1e-4 under any summation order
        {"name": "gpt2_tiny-hybrid-momentum", "model": "gpt2_tiny", "strategy": REAL_PLANS["gpt2_tiny"],
         "machines": MACHINES, "steps": 3, "optimizer": "momentum", "lr": 0.01},
        {"name": "gpt2_tiny-b25-momentum", "model": "gpt2_tiny", "strategy": REAL_PLANS["gpt2_tiny-b25"],
         "machines": MACHINES, "steps": 3, "optimizer": "momentum", "lr": 0.01},
        {"name": "mlp-sfb-sgd", "model": "mlp", "strategy": _mlp_sfb_plan(graph, groups),
         "machines": MACHINES, "steps": 3, "optimizer": "sgd", "lr": 0.05},
    ]


def test_bucket_plans_fuse_as_intended():
    from tag.deploy.schedule import build_schedule

    def groups(plan, graph=None, gs=TOY_GROUPS):
        s = build_schedule(graph or toy_graph(B), gs, plan, MACHINES)
        return [b.groups for b in s.buckets]

    for alg in ALGORITHMS:  # the tied W1 syncs on its own (groups ())
        assert groups(PLANS[f"b0-{alg}"]) == [(3,), (1,), (0,), ()]
        assert groups(PLANS[f"b25-{alg}"]) == [(3, 1, 0), ()]
    assert groups(PLANS["explicit"]) == [(3,), (1, 0), ()]
    graph, _, gs = _real("gpt2_tiny")
    fused = groups(REAL_PLANS["gpt2_tiny-b25"], graph, gs)
    assert len(fused[0]) > 1 and len(fused) <= 2  # one bucket of several groups (and the tied embedding's own sync)


def test_four_ranks_all_plans_sgd_and_adam(tmp_path):
    scenarios = _scenarios(list(PLANS), ["sgd", "adam"]) + _real_scenarios()
    results = run_scenarios(4, scenarios, make, str(tmp_path))
    _check(results, scenarios)
    # two different plans print the same losses (data depends only on seed and batch)
    assert results["dp_even-adam"][0]["losses"] == pytest.approx(results["hybrid-adam"][0]["losses"], rel=1e-5)


"""Deployed training on 2-4 gloo ranks equals single-process full-batch training (losses and parameters).

One spawn of 4 ranks runs every plan in turn (starting ranks is the slow part); another spawn of 2
ranks maps 4-device plans onto fewer processes. The reference is plain full-batch training of the same
toy model with torch.optim, written independently in the harness.
"""

from __future__ import annotations

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


def make(sc):
    graph = toy_graph(B)
    return graph, ToyProgram(graph, seed=0), TOY_GROUPS


def _scenarios(names, optimizers, steps=3):
    out = []
    for name in names:
        for opt in optimizers:
            lr = 0.05 if opt == "sgd" else 0.01
            out.append({"name": f"{name}-{opt}", "strategy": PLANS[name], "machines": MACHINES,
                        "steps": steps, "optimizer": opt, "lr": lr})
    return out


def _reference(opt, lr, steps=3):
    graph = toy_graph(B)
    data, targets = synthetic_batch(graph, B, 0)
    return reference_training(graph, ToyProgram(graph, seed=0), data, targets, steps, opt, lr)


def _check(results, scenarios):
    refs = {}
    for sc in scenarios:
        key = (sc["optimizer"], sc["lr"])
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


def test_four_ranks_all_plans_sgd_and_adam(tmp_path):
    scenarios = _scenarios(list(PLANS), ["sgd", "adam"])
    results = run_scenarios(4, scenarios, make, str(tmp_path))
    _check(results, scenarios)
    # two different plans print the same losses (data depends only on seed and batch)
    assert results["dp_even-adam"][0]["losses"] == pytest.approx(results["hybrid-adam"][0]["losses"], rel=1e-5)


def test_four_devices_on_two_ranks(tmp_path):
    scenarios = _scenarios(["uneven", "hybrid", "sfb"], ["momentum"]) + _scenarios(["hier"], ["adam"])
    results = run_scenarios(2, scenarios, make, str(tmp_path))
    _check(results, scenarios)

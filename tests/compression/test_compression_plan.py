"""plan() with SFB on is never slower than with it off for the same playouts and seed."""

from __future__ import annotations

import pytest
from sfbkit import TRAINING, FixedCost, cluster, fc_model

from tag.search.planner import plan
from tag.sim import simulate

CASES = [  # (link Gbps, devices per machine, forward ms per row of the middle layer)
    (10.0, 1, 0.2),
    (25.0, 2, 0.5),
    (10.0, 2, 1.0),
]


@pytest.mark.parametrize("link_gbps,per_machine,fwd", CASES)
def test_plan_with_sfb_never_slower(link_gbps, per_machine, fwd):
    gg = fc_model([(512, 4096), (4096, 4096), (4096, 1000)], 32)
    cl = cluster(2 if per_machine == 2 else 4, per_machine, link_gbps=link_gbps, intra_gbps=32.0)
    cost = FixedCost([fwd * 0.5, fwd, fwd * 0.5], [fwd, 2 * fwd, fwd])
    kw = dict(playouts=30, budget_s=30, seed=1, refine_simulations=200)
    off = plan(gg, cl, cost, TRAINING, sfb=False, **kw)
    on = plan(gg, cl, cost, TRAINING, sfb=True, **kw)
    assert on.result.iteration_ms <= off.result.iteration_ms
    assert on.no_sfb_result.iteration_ms == off.result.iteration_ms  # same search before SFB
    assert not any(d.sfb for d in off.strategy.decisions)
    chosen = [n for d in on.strategy.decisions for n in d.sfb]
    assert chosen == on.sfb["ops"]
    again = simulate(gg, cl, cost, on.strategy, TRAINING).iteration_ms
    assert again == pytest.approx(on.result.iteration_ms, rel=1e-12)
    if chosen:
        assert "+sfb" in on.method
        assert on.sfb["iteration_ms_with"] == pytest.approx(on.result.iteration_ms, rel=1e-12)


def test_plan_sfb_pays_on_slow_links():
    # 2 machines x 2 devices at 10 Gbps, 16.8 MB middle layer, 32 rows: SFB lets data parallelism win
    gg = fc_model([(512, 4096), (4096, 4096), (4096, 1000)], 32)
    cl = cluster(2, 2, link_gbps=10.0, intra_gbps=32.0)
    cost = FixedCost([0.5, 1.0, 0.5], [1.0, 2.0, 1.0])
    kw = dict(playouts=30, budget_s=30, seed=1, refine_simulations=200)
    off = plan(gg, cl, cost, TRAINING, sfb=False, **kw).result.iteration_ms
    on = plan(gg, cl, cost, TRAINING, sfb=True, **kw)
    assert on.result.iteration_ms < 0.8 * off
    assert "fc1" in on.sfb["ops"]

"""Recomputation (Decision.recompute) in the simulator's timeline: the backward re-runs the forward first.

FixedCost: forward f[g] x rows ms, backward twice that, update upd[g] ms; links free (device latency 0).
"""

import pytest

from simkit_builders import FixedCost, make_cluster, make_gg
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig
from tag.strategy.pipeline import Pipeline, Stage

TC = TrainingConfig(optimizer="adam")


def test_one_device_recompute_adds_exactly_the_forward():
    # 4 rows, f = 1, 2, 3: forwards 4 + 8 + 12, backwards 8 + 16 + 24, updates 0.5 + 0.25. Recompute on group 1
    # adds its forward (8 ms) once, to its backward.
    cl = make_cluster([1])
    gg = make_gg([dict(param_bytes=100, param_count=25), dict(), dict(param_bytes=40, param_count=10)],
                 [(0, 1, 8.0, 0.0), (1, 2, 8.0, 0.0)])
    cost = FixedCost([1.0, 2.0, 3.0], [0.5, 0.0, 0.25])
    plain = Strategy(tuple(Decision((4,)) for _ in range(3)))
    rec = Strategy((Decision((4,)), Decision((4,), recompute=True), Decision((4,))))
    assert simulate(gg, cl, cost, plain, TC).iteration_ms == pytest.approx(24 + 48 + 0.75)
    r = simulate(gg, cl, cost, rec, TC, trace=True)
    assert r.iteration_ms == pytest.approx(24 + 48 + 8 + 0.75)
    bwd1 = next(e for e in r.trace_events if e["ph"] == "X" and e["name"].startswith("bwd g1"))
    assert bwd1["dur"] / 1e3 == pytest.approx(16 + 8) and bwd1["args"]["recompute"] is True


def test_recompute_on_replicas_delays_the_sync_by_the_forward():
    # 2 devices, 4 rows each, one group of 4e6 parameter bytes: forward 4, backward 8 (+ 4 recomputed), ring
    # all-reduce 2 x 2e6 / 1e7 + 2 x 0.002, step 0.1.
    cl = make_cluster([2])
    gg = make_gg([dict(param_bytes=4e6, param_count=1_000_000)], [])
    ring = 2 * 2e6 / 1e7 + 2 * 0.002
    for recompute, expected in ((False, 12 + ring + 0.1), (True, 16 + ring + 0.1)):
        st = Strategy((Decision((4, 4), "ring", recompute=recompute),))
        assert simulate(gg, cl, FixedCost([1.0], [0.1]), st, TC).iteration_ms == pytest.approx(expected)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipelined_recompute_adds_the_forward_to_every_micro_batch_backward(schedule):
    # 2 stages (group 0 on device 0, group 1 on device 1), m = 4 micro-batches of 1 row: forward 1 ms, backward
    # 2 ms, 3 with recompute. With free links GPipe and 1F1B both end at (m + S - 1) x (F + B):
    # 5 x 3 = 15 ms plain, 5 x 4 = 20 ms with recompute on both groups (tests/sim/test_pipeline_timeline.py for
    # the plain start times; each backward is 1 ms longer and the steady state is F + B per micro-batch).
    cl = make_cluster([2], dev_lat_us=0.0)
    gg = make_gg([dict(param_bytes=40, param_count=10), dict(param_bytes=40, param_count=10)], [(0, 1, 0.0, 0.0)])
    pl = Pipeline((Stage((0,), (0,)), Stage((1,), (1,))), 4, schedule)
    for recompute, expected in ((False, 15.0), (True, 20.0)):
        st = Strategy((Decision((4, 0), recompute=recompute), Decision((0, 4), recompute=recompute)), pipeline=pl)
        r = simulate(gg, cl, FixedCost([1.0, 1.0]), st, TC)
        assert r.iteration_ms == pytest.approx(expected)
        assert r.busy_ms["m0/0"] == pytest.approx(4 * (1 + 2 + recompute))

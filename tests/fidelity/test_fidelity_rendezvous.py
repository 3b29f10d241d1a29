"""simulate(..., blocking_sends=True): a transfer is a rendezvous of its two ranks at the consumer group's
place in the group order and blocks both, as the deploy runtime's exchanges do. Timelines worked out by hand."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sim"))
from simkit_builders import FixedCost, make_cluster, make_gg  # noqa: E402
from tag.sim import simulate  # noqa: E402
from tag.strategy import Decision, Strategy, TrainingConfig  # noqa: E402

L = 2e-3  # make_cluster: two 1-us device links between the devices of one machine, ms
D0, D1 = (1, 0), (0, 1)


def _case():
    # g0 (d0, 1 ms) -> g2 (d1, 1 ms) -> g4 (d0, 1 ms); g1 (d1, 10 ms) before g2; g3 (d0, 5 ms) from g0 into g4.
    # Latency-only messages (no bytes); backward = 2 x forward.
    gg = make_gg([dict() for _ in range(5)], [(0, 2, 0.0, 0.0), (0, 3, 0.0, 0.0), (2, 4, 0.0, 0.0), (3, 4, 0.0, 0.0)])
    st = Strategy(tuple(Decision(r) for r in (D0, D1, D1, D0, D0)))
    return gg, st, FixedCost([1.0, 10.0, 1.0, 5.0, 1.0])


def test_async_sends_let_the_sender_run_on():
    gg, st, cost = _case()
    r = simulate(gg, make_cluster([2]), cost, st, TrainingConfig(), overlap_sync=False)
    # fwd: d0 g0 [0,1] g3 [1,6]; d1 g1 [0,10] g2 [10,11]; g4 [11+L,12+L]
    # bwd: d0 g4 [12+L,14+L] g3 [14+L,24+L]; d1 g2 [14+2L,16+2L] g1 [16+2L,36+2L]; d0 g0 [24+L,26+L]
    assert r.iteration_ms == pytest.approx(36 + 2 * L)


def test_blocking_sends_wait_for_both_ranks():
    gg, st, cost = _case()
    r = simulate(gg, make_cluster([2]), cost, st, TrainingConfig(), overlap_sync=False, blocking_sends=True)
    # fwd: g0->g2 starts when d1 reaches g2 (10): d0's g3 is held until 10+L -> [10+L,15+L];
    #      g2->g4 starts when d0 finished g3 -> g4 [15+2L,16+2L]
    # bwd: d0 g4 [16+2L,18+2L]; its exchange holds d0's g3 until 18+3L -> [18+3L,28+3L]; d1 g2 [18+3L,20+3L];
    #      g2's exchange waits for d0 to reach g2 (28+3L) and holds d1's g1 -> [28+4L,48+4L]
    assert r.iteration_ms == pytest.approx(48 + 4 * L)


def test_blocking_changes_nothing_without_transfers():
    gg, _, cost = _case()
    st = Strategy(tuple(Decision(D0) for _ in range(5)))
    a = simulate(gg, make_cluster([2]), cost, st, TrainingConfig(), overlap_sync=False)
    b = simulate(gg, make_cluster([2]), cost, st, TrainingConfig(), overlap_sync=False, blocking_sends=True)
    assert a.iteration_ms == pytest.approx(b.iteration_ms) == pytest.approx(18 + 36)

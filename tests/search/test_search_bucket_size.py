"""The refinement changes the bucket cap when that pays (DisCo's tensor fusion as a plan decision).

Two devices in one machine (routes of 10^7 bytes/ms and 2 us), two groups of 10^7 parameter bytes, 2 rows each,
fwd 1 ms per row and bwd 2 ms per row, no update. By hand, each device runs fwd g0 [0, 2], fwd g1 [2, 4],
bwd g1 [4, 8], bwd g0 [8, 12]. A ring all-reduce of S bytes over 2 devices carries S per hop with 2 steps:
S / 10^7 + 2 x 0.002 ms.

* a 25 MiB cap (26.2 x 10^6 bytes): g1's gradients (10^7 bytes, ready first) leave room, so g0's join them in one
  bucket of 2 x 10^7 bytes, which waits for bwd g0 and ends at 12 + 2 + 0.004 = 14.004 ms;
* one bucket per group: g1's sync runs 8 .. 9.004 during bwd g0, g0's sync ends at 12 + 1 + 0.004 = 13.004 ms.
"""

from __future__ import annotations

import os
import sys

import pytest

from tag.search.evaluate import Evaluator
from tag.search.refine import BUCKET_SIZES_MB, bucket_neighbours, refine
from tag.search.space import SearchSpace
from tag.sim import simulate
from tag.strategy import Decision, Strategy, TrainingConfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sim"))
from simkit_builders import FixedCost, make_cluster, make_gg  # noqa: E402  (the simulator tests' hand-built inputs)


def _setup():
    cluster = make_cluster([2], intra_gbps=80.0, dev_lat_us=1.0)  # 80 Gb/s = 10^7 bytes/ms; 2 links of 1 us
    gg = make_gg([dict(param_bytes=1e7, param_count=2_500_000), dict(param_bytes=1e7, param_count=2_500_000)],
                 [(0, 1, 0.0, 0.0)])
    return gg, cluster, FixedCost([1.0, 1.0])


def test_hand_worked_times_of_both_caps():
    gg, cluster, cost = _setup()
    decs = (Decision((2, 2), "ring"), Decision((2, 2), "ring"))
    training = TrainingConfig(optimizer="sgd")
    assert simulate(gg, cluster, cost, Strategy(decs, 25.0), training).iteration_ms == pytest.approx(14.004)
    assert simulate(gg, cluster, cost, Strategy(decs, 0.0), training).iteration_ms == pytest.approx(13.004)


def test_refinement_takes_the_smaller_cap_because_it_pays():
    gg, cluster, cost = _setup()
    training = TrainingConfig(optimizer="sgd")
    decs = (Decision((2, 2), "ring"), Decision((2, 2), "ring"))
    start = Strategy(decs, 25.0)
    ev = Evaluator(lambda s: simulate(gg, cluster, cost, s, training), 14.004, {"m0/0": 15.0, "m0/1": 15.0})
    space = SearchSpace(order=[0, 1], candidates=[[decs[0]], [decs[1]]], has_params=[True, True],
                        splittable=[True, True])
    best = refine(space, ev, start, max_simulations=100)
    # 0, 1 and 5 MiB all give one bucket per group (10^7 bytes > 5 MiB); the first strict gain is kept
    assert best.bucket_mb == 0.0
    assert best.decisions == decs
    assert ev.result(best).iteration_ms == pytest.approx(13.004)


def test_bucket_neighbours_are_every_other_cap():
    s = Strategy((Decision((2, 2), "ring"),), 25.0)
    assert [n.bucket_mb for n in bucket_neighbours(s)] == [c for c in BUCKET_SIZES_MB if c != 25.0]
    assert all(n.decisions == s.decisions for n in bucket_neighbours(s))

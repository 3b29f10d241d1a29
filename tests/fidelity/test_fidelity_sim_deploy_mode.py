"""simulate(..., overlap_sync=False): syncs wait for the whole backward, as the deploy runtime runs them."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sim"))
from simkit_builders import FixedCost, make_cluster, make_gg  # noqa: E402
from tag.sim import simulate  # noqa: E402
from tag.strategy import Decision, Strategy, TrainingConfig  # noqa: E402

TC = TrainingConfig(optimizer="adam")
INTRA_BPMS = 80e9 / 8 / 1e3  # make_cluster's 80 Gbit/s device links, bytes per ms
INTRA_LAT_MS = 2 * 1e-3  # two 1-us device links


def _two_groups():
    # fwd0 0-4, fwd1 4-8, bwd1 8-16, bwd0 16-24 on both devices (4 rows x 1 ms, backward twice forward)
    gg = make_gg([dict(param_bytes=4e6, param_count=1_000_000), dict(param_bytes=1e8, param_count=25_000_000)],
                 [(0, 1, 10.0, 0.0)])
    st = Strategy((Decision((4, 4), "allreduce"), Decision((4, 4), "allreduce")))
    return gg, st


def test_without_overlap_syncs_start_after_the_whole_backward():
    gg, st = _two_groups()
    cost = FixedCost([1.0, 1.0], [0.1, 0.1])
    sync1 = 1e8 / INTRA_BPMS + 2 * INTRA_LAT_MS  # ring of 2: volume S per hop, 2 steps of latency
    sync0 = 4e6 / INTRA_BPMS + 2 * INTRA_LAT_MS
    r = simulate(gg, make_cluster([2]), cost, st, TC, overlap_sync=False)
    # both syncs wait for bwd0 (ends at 24), run one at a time, then the two updates (0.1 + 0.1)
    assert r.iteration_ms == pytest.approx(24 + sync1 + sync0 + 0.2)
    overlapped = simulate(gg, make_cluster([2]), cost, st, TC)
    assert overlapped.iteration_ms == pytest.approx(16 + sync1 + sync0 + 0.2)


def test_without_params_replicated_nothing_changes():
    gg = make_gg([dict(param_bytes=4e6, param_count=1_000_000), dict()], [(0, 1, 10.0, 0.0)])
    st = Strategy((Decision((8, 0)), Decision((0, 8))))
    cost = FixedCost([0.5, 0.5], [0.1, 0.0])
    a = simulate(gg, make_cluster([2]), cost, st, TC, overlap_sync=False)
    b = simulate(gg, make_cluster([2]), cost, st, TC)
    assert a.iteration_ms == pytest.approx(b.iteration_ms)

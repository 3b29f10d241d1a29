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


class _CopyCost(FixedCost):
    """FixedCost plus the optional sync-copy term: (in, out) ms = (a, b) x MB of the bucket, device 1 twice as slow."""

    def __init__(self, *args, a: float, b: float):
        super().__init__(*args)
        self.a, self.b = a, b

    def sync_copy_ms(self, device, nbytes):
        return self.a * nbytes / 1e6, self.b * nbytes / 1e6


def test_sync_copies_delay_the_collective_and_the_update():
    gg, st = _two_groups()
    base = FixedCost([1.0, 1.0], [0.1, 0.1])
    cost = _CopyCost([1.0, 1.0], [0.1, 0.1], a=0.01, b=0.02)
    plain = simulate(gg, make_cluster([2]), base, st, TC, overlap_sync=False)
    r = simulate(gg, make_cluster([2]), cost, st, TC, overlap_sync=False)
    # the two syncs run one after another on one communicator, each with its flatten before and copy-back after:
    # 1e8 + 4e6 bytes -> (0.01 + 0.02) ms/MB x 104 MB = 3.12 ms more
    assert r.iteration_ms == pytest.approx(plain.iteration_ms + 0.03 * 104)
    # a group on one device has no sync and pays no copy
    single = Strategy((Decision((8, 0)), Decision((8, 0))))
    assert simulate(gg, make_cluster([2]), cost, single, TC).iteration_ms == pytest.approx(
        simulate(gg, make_cluster([2]), base, single, TC).iteration_ms)

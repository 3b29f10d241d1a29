"""The rank speed: the square root of the probe's alone step (a rank's own process) over the profile's step block at
the probe's rows, worked out by hand from the JSON; where it does not apply it is 1; the two-pass prediction carries it."""

from types import SimpleNamespace

import numpy as np
import pytest

from tag.cost.contention import ContentionTerms, compute_scale, deployed_step_ms
from tag.cost.profile_db import from_json
from tag.errors import InputError
from tag.profile.ops import probe_rows

STEP = {"optimizer": "adam", "rows": [8, 16, 32],
        "groups": [{"ops": ["a"], "fwd_ms": [1.0, 2.0, 4.0], "bwd_ms": [2.0, 4.0, 8.0]},
                   {"ops": ["b"], "fwd_ms": [0.5, 1.0, 2.0], "bwd_ms": [1.0, 2.0, 3.0]}],
        "update_ms": [0.8, 0.8, 0.8], "other_ms": [0.2, 0.3, 0.5],
        "copy_bytes": [], "copy_in_ms": [], "copy_out_ms": []}
BLOCK = {"clock": "thread", "ranks": 2, "rows": 16, "handoff_ms": 0.2, "alone_stretch": 1.0,
         "together_stretch": 1.0, "together_speed": 1.1, "alone_step_ms": 12.15, "together_step_ms": 13.365}


def _terms(step=STEP, **contention):
    obj = {"version": 1, "device_type": "cpu", "ops": {}, "contention": {**BLOCK, **contention}}
    if step is not None:
        obj["step"] = step
    return from_json(obj, "p.json").contention


def test_rank_speed_at_a_measured_row_count():
    # at 16 rows the block's step: groups 2 + 4 + 1 + 2 = 9, update 0.8, rest 0.3 -> 10.1 ms; sqrt(12.15 / 10.1)
    assert _terms().rank_speed == pytest.approx((12.15 / 10.1) ** 0.5)


def test_rank_speed_between_row_counts_interpolates_every_part():
    # at 24 rows, halfway between 16 and 32: groups 3 + 6 + 1.5 + 2.5 = 13, update 0.8, rest 0.4 -> 14.2 ms
    assert _terms(rows=24, alone_step_ms=20.448).rank_speed == pytest.approx(1.2)  # 20.448 / 14.2 = 1.44


@pytest.mark.parametrize("step,contention", [
    (None, {}),                              # no step block to compare with
    (STEP, {"rows": 4}),                     # below the block's rows: no extrapolation
    (STEP, {"rows": 64}),                    # above them
    (STEP, {"clock": "wall"}),               # the block on the wall clock, the probe on thread CPU
])
def test_rank_speed_is_one_where_it_cannot_be_read(step, contention):
    assert _terms(step, **contention).rank_speed == 1.0


def test_an_older_block_without_the_alone_step_has_rank_speed_one():
    obj = {"version": 1, "device_type": "cpu", "ops": {}, "step": STEP,
           "contention": {k: v for k, v in BLOCK.items() if k != "alone_step_ms"}}
    assert from_json(obj, "p.json").contention.rank_speed == 1.0


def test_a_bad_alone_step_is_named():
    with pytest.raises(InputError, match=r"p\.json: contention\.alone_step_ms: expected a non-negative number"):
        _terms(alone_step_ms=-3.0)


def test_compute_scale_multiplies_by_the_rank_speed():
    t = ContentionTerms(2, 16, 0.0, 1.02, 1.10, 1.30, rank_speed=1.25)
    # c = 1.5 of 2: stretch 1.06, speed 1.15 (tests/cost/test_contention.py), times 1.25
    assert compute_scale(t, 1.5, 2) == pytest.approx(1.06 * 1.15 * 1.25)
    assert compute_scale(t, 1.0, 2) == pytest.approx(1.02 * 1.25)


def test_the_prediction_scales_compute_by_the_rank_speed():
    """A fake two-rank simulator: rank 0 computes 30 k ms, rank 1 15 k ms, no latency; with unit stretches and speed
    the second pass runs at k = rank speed, so the step is 30 x 1.2 ms."""
    class Cost:
        def __init__(self, k=1.0):
            self.k = k

        def scaled(self, f):
            return Cost(self.k * f)

    def simulate(gg, cluster, cost, strategy, training, *, overlap_sync, blocking_sends, trace=False):
        return SimpleNamespace(iteration_ms=30.0 * cost.k, fit_iteration_ms=None, oom=False,
                               busy_ms={"a": 30.0 * cost.k, "b": 15.0 * cost.k}, trace_events=[])

    t = ContentionTerms(2, 16, 0.0, 1.0, 1.0, 1.0, rank_speed=1.2)
    cl = SimpleNamespace(latency_us=np.zeros((2, 2)))
    res = deployed_step_ms(simulate, None, cl, Cost(), None, None, terms=t, n_ranks=2)
    assert res.scale == pytest.approx(1.2) and res.step_ms == pytest.approx(36.0)


@pytest.mark.parametrize("rows,ranks,expected", [
    ([4, 8, 16, 32, 48, 64], 2, 32),   # 64 / 2 is measured
    ([4, 8, 16, 32, 64], 3, 16),       # 64 / 3 = 21 rows: the largest measured count below
    ([16], 2, 16),                     # 8 is not measured: the smallest count, inside the block
    ([1, 2, 4], 8, 1),
])
def test_probe_rows_are_a_measured_row_count(rows, ranks, expected):
    assert probe_rows(rows, ranks) == expected

"""Measured series fitted non-decreasing in size (`tag.cost.profile_fit`), and the profiled cost model reading the fit."""

import itertools
import random

import pytest

from tag.cost import ProfileCostModel
from tag.cost.profile_db import OpProfile, ProfileDB, StepGroup, StepProfile, op_signature
from tag.cost.profile_fit import monotone, monotone_db
from tag.strategy import TrainingConfig
from tests.cost.test_cost_profile import DEV, _gg


def _min_max(ys):
    """The isotonic fit by its min-max formula: z_k = max_{i <= k} min_{j >= k} mean(y_i..y_j)."""
    n = len(ys)
    return [max(min(sum(ys[i:j + 1]) / (j + 1 - i) for j in range(k, n)) for i in range(k + 1)) for k in range(n)]


def test_the_fit_equals_the_min_max_formula_on_random_series():
    rng = random.Random(7)
    for _ in range(300):
        ys = [rng.uniform(0.0, 3.0) for _ in range(rng.randint(1, 9))]
        assert monotone(ys) == pytest.approx(_min_max(ys))


def test_no_non_decreasing_series_fits_closer():
    """Least squares, checked against every non-decreasing series on a grid of the values' own levels."""
    ys = [0.335, 0.381, 0.33, 0.5, 0.45]
    fit = monotone(ys)
    err = sum((y - z) ** 2 for y, z in zip(ys, fit))
    levels = sorted(set(ys) | {0.3555, 0.4, 0.475, 0.35})
    for cand in itertools.combinations_with_replacement(levels, len(ys)):  # sorted tuples: every non-decreasing one
        assert sum((y - z) ** 2 for y, z in zip(ys, cand)) >= err - 1e-15
    # by hand: 0.381 and 0.33 pool to 0.3555, 0.5 and 0.45 to 0.475
    assert fit == pytest.approx([0.335, 0.3555, 0.3555, 0.475, 0.475])


def test_a_non_decreasing_series_is_kept_and_sums_are_kept():
    assert monotone([0.1, 0.1, 0.2, 0.9]) == [0.1, 0.1, 0.2, 0.9]
    ys = [3.0, 1.0, 2.0, 0.5]
    assert sum(monotone(ys)) == pytest.approx(sum(ys))
    assert monotone(ys) == pytest.approx([1.625] * 4)


def test_the_profiled_model_never_prices_more_rows_cheaper_and_the_profile_is_kept():
    gg = _gg()
    sig = op_signature(gg.graph.ops[0], gg.graph)
    ops = {sig: OpProfile([8, 16, 32], [0.2, 0.381, 0.335], [0.5, 0.61, 0.547])}  # noisy: 16 rows above 32
    db = ProfileDB("TestGPU", 1, {}, ops)
    cm = ProfileCostModel(gg, TrainingConfig(), db)
    relu = cm.roofline.ops_ms(0, DEV, 16, "fwd", [1])  # the unmeasured ReLU keeps the roofline
    # by hand: forward 0.381 and 0.335 pool to 0.358; backward 0.61 and 0.547 to 0.5785
    assert cm.group_fwd_ms(0, DEV, 16) == pytest.approx(0.358 + relu)
    assert cm.group_fwd_ms(0, DEV, 24) == pytest.approx(0.358 + cm.roofline.ops_ms(0, DEV, 24, "fwd", [1]))
    assert cm.group_fwd_ms(0, DEV, 12) == pytest.approx(0.279 + cm.roofline.ops_ms(0, DEV, 12, "fwd", [1]))
    bwd_relu = cm.roofline.ops_ms(0, DEV, 16, "bwd", [1])
    assert cm.group_bwd_ms(0, DEV, 16) == pytest.approx(0.5785 + bwd_relu)
    times = [cm.group_fwd_ms(0, DEV, r) for r in range(1, 65)]
    assert all(a <= b for a, b in zip(times, times[1:]))
    assert db.ops[sig].fwd_ms == [0.2, 0.381, 0.335]  # the profile as read is unchanged


def test_every_step_series_is_fitted_but_the_update():
    st = StepProfile("adam", [16, 32], [StepGroup(["mm"], [0.4, 0.3], [0.6, 0.5], 1.0, 1024)], [2.39, 1.39],
                     [0.2, 0.1], [1024, 2048], [0.05, 0.04], [0.03, 0.02], [0.02, 0.01])
    db = ProfileDB("TestGPU", 1, {}, {"s": OpProfile([1, 2], [1.0, 0.5], None)}, step=st)
    fit = monotone_db(db)
    assert fit.ops["s"].fwd_ms == [0.75, 0.75] and fit.ops["s"].bwd_ms is None
    g = fit.step.groups[0]
    assert g.fwd_ms == pytest.approx([0.35, 0.35]) and g.bwd_ms == pytest.approx([0.55, 0.55])
    assert fit.step.other_ms == pytest.approx([0.15, 0.15])
    assert fit.step.copy_in_ms == pytest.approx([0.045, 0.045])
    assert fit.step.copy_out_ms == pytest.approx([0.025, 0.025])
    assert fit.step.fill_ms == pytest.approx([0.015, 0.015])
    assert fit.step.update_ms == [2.39, 1.39]  # the update is read as a median, not per row count
    assert db.step.groups[0].fwd_ms == [0.4, 0.3] and db.ops["s"].fwd_ms == [1.0, 0.5]

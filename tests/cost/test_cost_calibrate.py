"""tag.cost.calibrate: the MAPE by hand, and the coordinate search against a brute force over the whole grid."""

import itertools

import pytest

from tag.cost.calibrate import coordinate_fit, mape
from tag.cost.efficiency import EfficiencyParams


def test_mape_by_hand():
    # |120-100|/100 = 0.2, |45-50|/50 = 0.1, |30-30|/30 = 0 -> mean 0.1 -> 10 %
    assert mape([120.0, 45.0, 30.0], [100.0, 50.0, 30.0]) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        mape([1.0], [1.0, 2.0])


def _predict(p: EfficiencyParams) -> list[float]:
    # separable in the two parameters: row 0 depends on e_conv only, row 1 on launch_us only
    return [p.base["conv"] * 100.0, 40.0 + p.launch_us * 3.0]


GRID = {"e_conv": [0.5, 0.6, 0.7, 0.8], "launch_us": [2.0, 5.0, 10.0, 20.0]}


@pytest.mark.parametrize("published", [[72.0, 57.0], [70.0, 55.0], [51.0, 95.0]])
def test_coordinate_fit_finds_the_grid_optimum_of_a_separable_error(published):
    start = EfficiencyParams(launch_us=20.0).with_values(e_conv=0.5)
    got = coordinate_fit(_predict, published, start=start, grid=GRID, sweeps=2)
    # brute force: every grid point
    best = min((mape(_predict(start.with_values(e_conv=e, launch_us=u)), published), e, u)
               for e, u in itertools.product(GRID["e_conv"], GRID["launch_us"]))
    assert got.mape_pct == pytest.approx(best[0])
    assert (got.params.base["conv"], got.params.launch_us) == (best[1], best[2])


def test_coordinate_fit_keeps_the_start_when_nothing_is_better():
    start = EfficiencyParams(launch_us=5.0).with_values(e_conv=0.7)
    got = coordinate_fit(_predict, [70.0, 55.0], start=start, grid=GRID)
    assert got.params == start and got.mape_pct == 0.0

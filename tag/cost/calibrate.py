"""Calibration of the roofline GPU parameters against published throughputs: a coordinate search over a grid.

The fit minimises the mean absolute percentage error

    MAPE(p) = 100 / n x sum_i |pred_i(p) - pub_i| / pub_i            (percent)

of predicted against published samples/s over the rows, over one `EfficiencyParams` set shared by every model
and GPU. The search visits the parameters in grid order; for each it tries every grid value with the others held
at the best so far and keeps a value only when it lowers the MAPE by more than 1e-9; it repeats for `sweeps`
passes or until a pass changes nothing. The predictions come from a callable the caller passes in
(`tag.bench.published_predict` simulates each row), so this module runs no simulation itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from tag.cost.efficiency import EfficiencyParams, params_for

# Grid of the FP32 fit. half_size_flops: up to about one wave of 128 x 128 GEMM tiles on a large GPU
# (80-108 SMs x 128 x 128 x K=64 x 2 FLOP); winograd_speedup: at most F(2x2,3x3)'s 2.25x fewer multiplies.
FIT_GRID: dict[str, list[float]] = {
    "e_conv": [0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9],
    "e_matmul": [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9],
    "half_size_flops": [0.0, 1e7, 3e7, 1e8, 3e8],
    "knee_intensity": [0.0, 5.0, 10.0, 20.0, 40.0, 80.0],
    "mem_efficiency": [0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    "launch_us": [2.0, 5.0, 10.0, 20.0],
    "winograd_speedup": [1.0, 1.25, 1.5, 1.75, 2.0, 2.25],
}
_TC = [0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0]
# Grid of the tensor-core fit (the TF32 rows, starting from the FP32 fit).
TC_GRID: dict[str, list[float]] = {"tc_conv": _TC, "tc_matmul": _TC}
# Grid of the mixed-precision fit (the AMP fit rows, starting from the TF32 fit): the share of the 16-bit peak.
AMP_GRID: dict[str, list[float]] = {"amp_conv": _TC, "amp_matmul": _TC}


@dataclass(frozen=True)
class FitResult:
    """The parameters the search ended on and their MAPE (percent) over the fitted rows."""

    params: EfficiencyParams
    mape_pct: float


def mape(predicted: Sequence[float], published: Sequence[float]) -> float:
    """Mean absolute percentage error of `predicted` against `published`, percent (0 for no rows).

    >>> round(mape([110.0, 90.0], [100.0, 100.0]), 6)
    10.0
    """
    if len(predicted) != len(published):
        raise ValueError(f"{len(predicted)} predictions for {len(published)} published values")
    return 100.0 * sum(abs(p - q) / q for p, q in zip(predicted, published)) / max(len(published), 1)


def coordinate_fit(predict: Callable[[EfficiencyParams], Sequence[float]], published: Sequence[float],
                   start: EfficiencyParams | None = None, grid: dict[str, list[float]] | None = None,
                   sweeps: int = 2, log: Callable[[str], None] | None = None) -> FitResult:
    """Coordinate search of the GPU efficiency parameters minimising `mape(predict(p), published)`.

    predict: parameters -> predicted samples/s per row (same order as `published`). grid: parameter name
    (an `EfficiencyParams.with_values` keyword) -> values to try, in the order the search visits them.
    start: the first point (default: the shipped GPU parameters). log: called once per parameter per sweep.
    """
    grid = grid or FIT_GRID
    best = start or params_for("gpu")
    best_err = mape(predict(best), published)
    for _ in range(sweeps):
        improved = False
        for name, values in grid.items():
            for v in values:
                cand = best.with_values(**{name: v})
                err = mape(predict(cand), published)
                if err < best_err - 1e-9:
                    best, best_err, improved = cand, err, True
            if log:
                log(f"  {name}: MAPE {best_err:.1f}%")
        if not improved:
            break
    return FitResult(best, best_err)


def describe(p: EfficiencyParams) -> str:
    """The GPU parameters the fit moves, in one line."""
    return (f"e_conv={p.base['conv']} e_matmul={p.base['matmul']} half_size_flops={p.half_size_flops:g} "
            f"knee_intensity={p.knee_intensity:g} mem_efficiency={p.mem_efficiency} launch_us={p.launch_us} "
            f"winograd_speedup={p.winograd_speedup} "
            f"tc_conv={p.tensor_core_fraction['conv']} tc_matmul={p.tensor_core_fraction['matmul']} "
            f"amp_conv={p.amp_fraction['conv']} amp_matmul={p.amp_fraction['matmul']}")

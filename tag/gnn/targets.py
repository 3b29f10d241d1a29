"""Training targets of the network, shared by self-play, lookahead and the value fit.

* `speed_target`: a plan's value target, ln(time_scale_ms / iteration_ms) clipped to [SPEED_FLOOR, SPEED_CEIL]
  (SPEED_FLOOR for a plan that runs out of memory); comparable across instances.
* `policy_target`: a distribution over a decision's candidates, softmax((v - max v) / temperature).
"""

from __future__ import annotations

import math

import numpy as np

from tag.gnn.data import SPEED_CEIL, SPEED_FLOOR  # SPEED_FLOOR: target of plans that run out of memory


def speed_target(result, time_scale_ms: float) -> float:
    """ln(time_scale_ms / iteration_ms) of a simulated plan, clipped to [-6, 1]; -6 if it runs out of memory."""
    if result.oom or not math.isfinite(result.iteration_ms) or result.iteration_ms <= 0:
        return SPEED_FLOOR
    return float(min(SPEED_CEIL, max(SPEED_FLOOR, math.log(time_scale_ms / result.iteration_ms))))


def policy_target(values, temperature: float) -> np.ndarray:
    """softmax((v - max v) / temperature) over candidate values (a distribution summing to 1).

    >>> policy_target([0.0, 0.0], 0.1).tolist()
    [0.5, 0.5]
    """
    v = np.asarray(values, dtype=np.float64)
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    z = np.exp((v - v.max()) / temperature)
    return z / z.sum()

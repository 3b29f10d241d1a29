"""Optimizer figures shared by the cost model (update time) and the simulator (memory).

All parameters, gradients and optimizer states are fp32 (4 bytes per element).
"""

from __future__ import annotations

FP32_BYTES = 4

# Optimizer state elements per parameter element: Adam keeps two moments, momentum one buffer.
_STATE_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2}


def state_bytes_per_param(optimizer: str) -> int:
    """Bytes of optimizer state per parameter element (adam 8, momentum 4, sgd 0).

    >>> state_bytes_per_param("adam")
    8
    """
    return _STATE_SLOTS[optimizer] * FP32_BYTES


def update_traffic_bytes_per_param(optimizer: str) -> int:
    """Memory traffic of one update step per parameter element, bytes.

    Read weight and gradient, write weight (12 bytes), plus read and write of every state slot.

    >>> update_traffic_bytes_per_param("sgd"), update_traffic_bytes_per_param("adam")
    (12, 28)
    """
    return 3 * FP32_BYTES + 2 * _STATE_SLOTS[optimizer] * FP32_BYTES

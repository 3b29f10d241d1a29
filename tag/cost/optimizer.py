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


# The elementwise kernels one update step runs per parameter element, as (tensors read, tensors written):
# torch.optim's default multi-tensor (foreach) implementations, torch 2.x, no weight decay:
#   sgd:      p += -lr g                                                      -> add_(p, g)
#   momentum: b *= mu; b += g; p += -lr b                                     -> mul_, add_, add_
#   adam:     m.lerp_(g); v *= b2; v += (1-b2) g g; s = sqrt(v); s /= bc2; s += eps; p += -step m / s
#             -> lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_
_UPDATE_KERNELS = {
    "sgd": [(2, 1)],
    "momentum": [(1, 1), (2, 1), (2, 1)],
    "adam": [(2, 1), (1, 1), (2, 1), (1, 1), (1, 1), (1, 1), (3, 1)],
}


def update_kernels(optimizer: str) -> int:
    """Elementwise kernels one update step runs over each parameter tensor (sgd 1, momentum 3, adam 7)."""
    return len(_UPDATE_KERNELS[optimizer])


def update_traffic_bytes_per_param(optimizer: str) -> int:
    """Memory traffic of one update step per parameter element, bytes: every tensor each kernel of the
    step reads or writes, 4 bytes each (`_UPDATE_KERNELS`).

    >>> update_traffic_bytes_per_param("sgd"), update_traffic_bytes_per_param("momentum"), update_traffic_bytes_per_param("adam")
    (12, 32, 72)
    """
    return sum(r + w for r, w in _UPDATE_KERNELS[optimizer]) * FP32_BYTES

"""Per-device peak memory over one iteration, in program order (see `tag.sim` for the model).

Static for the whole iteration: weights and optimizer states of every group a device computes rows of
(fp32; Adam 2 states per element, momentum 1, SGD 0). Then, walking the device's program:

* forward of g: + saved activations (saved_bytes_per_row x rows + saved_bytes_fixed) and the input
  slices received from other devices (kept until g's backward); transient while it runs: its outputs
  (out_bytes_per_row x rows);
* backward of g: + g's weight gradients (kept until the update); transient: its output gradients
  (out_bytes_per_row x rows) plus the gradient slices it receives; afterwards - its saved activations
  and received inputs.

Peak = static + the largest (live + transient) over the program. Figures are bytes.
"""

from __future__ import annotations

from tag.cost.optimizer import state_bytes_per_param


def static_bytes(group, optimizer: str) -> float:
    """Weights plus optimizer states of one group's parameters, bytes."""
    return group.param_bytes + group.param_count * state_bytes_per_param(optimizer)


def device_peak_bytes(groups_in_order: list, rows: list[int], optimizer: str,
                      recv_fwd: list[float], recv_bwd: list[float], extra_static: float = 0.0) -> float:
    """Peak bytes on one device that computes `rows[k]` rows of `groups_in_order[k]` (topological order).

    recv_fwd[k] / recv_bwd[k]: bytes of activations / gradients the device receives for that group.
    extra_static: further persistent bytes (weights, states and gradient of shared parameters).
    """
    static = extra_static + sum(static_bytes(g, optimizer) for g in groups_in_order)
    live = 0.0
    peak = 0.0
    for g, r, rf in zip(groups_in_order, rows, recv_fwd):
        out = g.out_bytes_per_row * r
        live += g.saved_bytes_per_row * r + g.saved_bytes_fixed + rf
        peak = max(peak, live + out)
    for k in range(len(groups_in_order) - 1, -1, -1):
        g, r = groups_in_order[k], rows[k]
        live += g.param_bytes
        peak = max(peak, live + g.out_bytes_per_row * r + recv_bwd[k])
        live -= g.saved_bytes_per_row * r + g.saved_bytes_fixed + recv_fwd[k]
    return static + peak

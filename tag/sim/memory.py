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

import numpy as np

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


def peak_memory_bytes(ctx, decisions, recv, optimizer: str, extra_static) -> np.ndarray:
    """Peak bytes per device (topology order) for a strategy: `device_peak_bytes` for all devices at once.

    recv: (consumer group, consumer device, producer group, producer device, bytes) per transfer pair;
    the consumer receives activations in forward and the producer receives gradients in backward.
    """
    rows = np.array([d.rows for d in decisions], dtype=float)  # groups x devices
    hosted = rows > 0
    recv_fwd = np.zeros_like(rows)
    recv_bwd = np.zeros_like(rows)
    if recv:
        cg, cd, pg, pd, b = (np.array(x) for x in zip(*recv))
        np.add.at(recv_fwd, (cg, cd), b)
        np.add.at(recv_bwd, (pg, pd), b)
    saved = ctx.saved_per_row[:, None] * rows + ctx.saved_fixed[:, None] * hosted + recv_fwd
    out = ctx.out_per_row[:, None] * rows
    cum = np.cumsum(saved, axis=0)  # live after each forward
    fwd_peak = (cum + out).max(axis=0)
    grads = ctx.param_bytes[:, None] * hosted
    grads_from = np.cumsum(grads[::-1], axis=0)[::-1]  # gradients allocated once backward reached g
    bwd_peak = (cum + grads_from + out + recv_bwd).max(axis=0)
    static = ctx.static_bytes @ hosted + np.asarray(extra_static, dtype=float)
    return static + np.maximum(np.maximum(fwd_peak, bwd_peak), 0.0)

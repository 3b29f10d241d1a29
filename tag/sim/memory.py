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

Pipelined strategies (`pipeline_peak_memory_bytes`): the same walk per micro-batch at rows[d] / m rows, with as
many micro-batches' activations held as the stage's schedule keeps in flight, and gradient buffers that live from
a group's first backward to the step (accumulation over micro-batches).
"""

from __future__ import annotations

import numpy as np

from tag.cost.optimizer import state_bytes_per_param
from tag.strategy.pipeline import stage_order


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


def _activation_terms(ctx, rows: np.ndarray, recv):
    """Per group x device, for `rows` (groups x devices) and the received transfers `recv` (consumer group, consumer
    device, producer group, producer device, bytes): (hosted mask, gradient bytes received in the backward, bytes
    saved for the backward = saved per row x rows + fixed where hosted + activations received, output bytes)."""
    hosted = rows > 0
    recv_fwd = np.zeros_like(rows)
    recv_bwd = np.zeros_like(rows)
    if recv:
        cg, cd, pg, pd, b = (np.array(x) for x in zip(*recv))
        np.add.at(recv_fwd, (cg, cd), b)
        np.add.at(recv_bwd, (pg, pd), b)
    saved = ctx.saved_per_row[:, None] * rows + ctx.saved_fixed[:, None] * hosted + recv_fwd
    out = ctx.out_per_row[:, None] * rows
    return hosted, recv_bwd, saved, out


def peak_memory_bytes(ctx, decisions, recv, optimizer: str, extra_static) -> np.ndarray:
    """Peak bytes per device (topology order) for a strategy: `device_peak_bytes` for all devices at once.

    recv: (consumer group, consumer device, producer group, producer device, bytes) per transfer pair;
    the consumer receives activations in forward and the producer receives gradients in backward.
    """
    rows = np.array([d.rows for d in decisions], dtype=float)  # groups x devices
    hosted, recv_bwd, saved, out = _activation_terms(ctx, rows, recv)
    cum = np.cumsum(saved, axis=0)  # live after each forward
    fwd_peak = (cum + out).max(axis=0)
    grads = ctx.param_bytes[:, None] * hosted
    grads_from = np.cumsum(grads[::-1], axis=0)[::-1]  # gradients allocated once backward reached g
    bwd_peak = (cum + grads_from + out + recv_bwd).max(axis=0)
    static = ctx.static_bytes @ hosted + np.asarray(extra_static, dtype=float)
    return static + np.maximum(np.maximum(fwd_peak, bwd_peak), 0.0)


def in_flight_terms(order: list[tuple[str, int]]) -> tuple[int, int, int, int]:
    """The micro-batch counts that decide a pipelined device's peak, from its stage's order (`stage_order`):
    (most micro-batches held at a forward before any backward, the same at a forward after one, micro-batches held
    at the first backward (itself included), most held at a later backward (itself included)); -1 where there is
    no such pass.

    >>> in_flight_terms([("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("B", 3)])
    (1, 1, 2, 2)
    """
    f0 = f1 = b0 = b1 = -1
    live = 0
    for kind, _ in order:
        if kind == "F":
            if b0 < 0:
                f0 = max(f0, live)
            else:
                f1 = max(f1, live)
            live += 1
        else:
            if b0 < 0:
                b0 = live
            else:
                b1 = max(b1, live)
            live -= 1
    return f0, f1, b0, b1


def pipeline_peak_memory_bytes(ctx, strategy, recv, optimizer: str, extra_static) -> np.ndarray:
    """Peak bytes per device (topology order) of a pipelined strategy, in each device's program order.

    Per micro-batch, device d holds for each of its groups the saved activations of rows[d] / m rows plus the
    activation slices it received (`recv`: the pairs of one micro-batch, as `peak_memory_bytes` reads them), A_d in
    all, from the group's forward until its backward; a stage order holds up to `max_in_flight` micro-batches at
    once. Gradients accumulate over micro-batches: a group's gradient buffer (param_bytes) is allocated at its first
    backward and kept until the step. With the one-micro-batch terms of `peak_memory_bytes` (cum_g live after the
    forward of g, out_g its outputs, recv_bwd_g the gradient slices it receives, grads_from_g the gradients of
    groups >= g, G all of them) and the counts of `in_flight_terms` (n_F0, n_F1, n_B0, n_B1) for d's stage:

        peak = static + max(n_F0 A + max_g(cum_g + out_g),          forward, no gradients yet
                            n_F1 A + max_g(cum_g + out_g) + G,      forward after a backward
                            (n_B0 - 1) A + max_g(cum_g + grads_from_g + out_g + recv_bwd_g),   first backward
                            (n_B1 - 1) A + G + max_g(cum_g + out_g + recv_bwd_g))              later backwards

    (terms without such a pass left out). With one stage and m = 1 this is `peak_memory_bytes`. Static bytes
    (weights and optimizer states) as without pipelining.
    """
    pl = strategy.pipeline
    m, n_st = pl.micro_batches, len(pl.stages)
    decisions = strategy.decisions
    rows = np.array([d.rows for d in decisions], dtype=float) / m  # groups x devices, one micro-batch
    hosted, recv_bwd, saved, out = _activation_terms(ctx, rows, recv)
    cum = np.cumsum(saved, axis=0)
    held = cum[-1] if len(cum) else np.zeros(rows.shape[1])  # A_d
    fwd = (cum + out).max(axis=0)
    grads = ctx.param_bytes[:, None] * hosted
    grads_from = np.cumsum(grads[::-1], axis=0)[::-1]
    all_grads = grads.sum(axis=0)
    bwd_first = (cum + grads_from + out + recv_bwd).max(axis=0)
    bwd_later = all_grads + (cum + out + recv_bwd).max(axis=0)
    peak = np.zeros(rows.shape[1])
    for s, st in enumerate(pl.stages):
        f0, f1, b0, b1 = in_flight_terms(stage_order(pl.schedule, pl.k, n_st, s, m))
        d = list(st.devices)
        terms = []
        if f0 >= 0:
            terms.append(f0 * held[d] + fwd[d])
        if f1 >= 0:
            terms.append(f1 * held[d] + fwd[d] + all_grads[d])
        if b0 >= 0:
            terms.append((b0 - 1) * held[d] + bwd_first[d])
        if b1 >= 0:
            terms.append((b1 - 1) * held[d] + bwd_later[d])
        peak[d] = np.maximum.reduce(terms)
    static = ctx.static_bytes @ hosted + np.asarray(extra_static, dtype=float)
    return static + np.maximum(peak, 0.0)


def strategy_peak_memory_bytes(ctx, strategy, memory_inputs) -> np.ndarray:
    """Peak bytes per device of `strategy` from its task graph's `MemoryInputs`: `peak_memory_bytes`, or
    `pipeline_peak_memory_bytes` for a pipelined strategy."""
    opt = ctx.training.optimizer
    if getattr(strategy, "pipeline", None) is not None:
        return pipeline_peak_memory_bytes(ctx, strategy, memory_inputs.recv, opt, memory_inputs.extra_static_bytes)
    return peak_memory_bytes(ctx, strategy.decisions, memory_inputs.recv, opt, memory_inputs.extra_static_bytes)

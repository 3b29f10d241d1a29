"""A strategy's per-device peak memory from its task graph's memory inputs (`strategy_peak_memory_bytes`): the
one-step terms of `tag.sim.memory` (whose docstring gives them and their notation), or, pipelined, each stage's pass
order walked over the one-micro-batch terms (`pipeline_peak_memory_bytes`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tag.cost.optimizer import FP32_BYTES
from tag.sim.memory import memory_terms
from tag.strategy.memory_decisions import MIXED_PRECISIONS, compute_bytes
from tag.strategy.pipeline import stage_order

RECV_AHEAD = 2  # passes ahead of the one that waits for them that the pipeline runtime posts its receives


def pipeline_peak_memory_bytes(ctx, strategy, recv, optimizer: str, extra_static,
                                precision: str = "fp32") -> np.ndarray:
    """Peak bytes per device (topology order) of a pipelined strategy, walking each stage's pass order
    (`stage_order`).

    Per micro-batch, device d holds the saved bytes of its groups at rows[d] / m rows (`memory_terms`; `recv`: the
    pairs of one micro-batch, as `peak_memory_bytes` reads them), A_d in all, from a group's forward until its
    backward. Gradients accumulate over micro-batches: a group's kept gradient buffer is allocated at its first
    backward and kept until the step (K all of them). With the one-micro-batch terms (cum_g saved after the
    forward of g, kept_from_g the kept gradients of groups >= g), at a pass with n micro-batches held before it,
    f forwards and b backwards done:

        F, before any backward:  n A + max_g(cum_g + fwd_transient_g)
        F, after one:            n A + max_g(cum_g + fwd_transient_g) + K
        first B:                 (n - 1) A + max_g(cum_g + kept_from_g + bwd_transient_g)
        later B:                 (n - 1) A + K + max_g(cum_g + bwd_transient_g)

    each plus what the pipeline runtime (`tag.deploy.pipeline_runtime`) holds besides: every slice it sent, b (SF_d +
    SB_d) (sends are asynchronous and waited for at the end of the passes; SF_d the activation bytes d sends per
    micro-batch, SB_d the gradient bytes; a sent activation is the output the forward holds until its micro-batch's
    backward, so it adds only after that, b backward passes done; under fp16/bf16 it is a 16-bit copy: f SF_d),
    and the receive buffers of the next RECV_AHEAD passes (posted ahead: the activation bytes d receives per
    micro-batch for an F pass, the gradient bytes for a B pass). A B pass keeps each group's outputs, received input
    leaves and input gradients until the pass ends (the runtime releases them with the micro-batch, not per group:
    `memory_terms`' bwd_transient adds those of the groups after g), and the last pass's through the step: K +
    update_transient + pass_kept (the sends are waited for before it). Corrections measured on CPU ranks (sent slices
    and receives ahead were missing: small_cnn 1F1B rank 1 -45%; then the pass's kept tensors: -19% -> 0%,
    benchmarks/memory.md). With one stage and m = 1 this is `peak_memory_bytes`.
    """
    pl = strategy.pipeline
    m, n_st = pl.micro_batches, len(pl.stages)
    micro = [replace(d, rows=tuple(r / m for r in d.rows)) for d in strategy.decisions]
    t = memory_terms(ctx, micro, recv, optimizer, precision, pipelined=True, micro_batches=m)
    held, fwd, bwd_first, all_kept = t.peak_parts()
    later = replace(t, kept=np.zeros_like(t.kept)).peak_parts()[2] + all_kept
    n_dev = t.saved.shape[1]
    c = compute_bytes(precision) / FP32_BYTES
    mixed = precision in MIXED_PRECISIONS
    sent = {"F": np.zeros(n_dev), "B": np.zeros(n_dev)}
    got = {"F": np.zeros(n_dev), "B": np.zeros(n_dev)}
    for _cg, cd, _pg, pd, b in recv:
        sent["F"][pd] += c * b
        got["F"][cd] += c * b
        sent["B"][cd] += c * b
        got["B"][pd] += c * b
    peak = np.zeros(n_dev)
    for s, st in enumerate(pl.stages):
        order = stage_order(pl.schedule, pl.k, n_st, s, m)
        d = list(st.devices)
        terms = [all_kept[d] + t.update_transient[d] + t.pass_kept[d]]  # the last backward pass's, still referenced
        n = 0
        done = {"F": 0, "B": 0}
        for i, (kind, _) in enumerate(order):
            # a sent output shares its storage (held until its micro-batch's backward) unless sent as a 16-bit copy
            extra = (done["F"] if mixed else done["B"]) * sent["F"][d] + done["B"] * sent["B"][d]
            extra = extra + sum(got[k][d] for k, _ in order[i + 1: i + 1 + RECV_AHEAD])
            if kind == "F":
                terms.append(n * held[d] + fwd[d] + (all_kept[d] if done["B"] else 0.0) + extra)
                n += 1
            else:
                terms.append((n - 1) * held[d] + (later[d] if done["B"] else bwd_first[d]) + extra)
                n -= 1
            done[kind] += 1
        peak[d] = np.maximum.reduce(terms)
    return t.persistent(extra_static) + np.maximum(peak, 0.0)


def strategy_peak_memory_bytes(ctx, strategy, memory_inputs) -> np.ndarray:
    """Peak bytes per device of `strategy` from its task graph's `MemoryInputs`: `peak_memory_bytes`, or
    `pipeline_peak_memory_bytes` for a pipelined strategy."""
    opt, prec = ctx.training.optimizer, getattr(ctx.training, "precision", "fp32")
    if getattr(strategy, "pipeline", None) is not None:
        return pipeline_peak_memory_bytes(ctx, strategy, memory_inputs.recv, opt, memory_inputs.extra_static_bytes,
                                          prec)
    zero2 = any(d.zero >= 2 for d in strategy.decisions)
    buckets = [b.bucket.groups for b in ctx.bucket_syncs(strategy)] if zero2 else ()
    t = memory_terms(ctx, strategy.decisions, memory_inputs.recv, opt, prec, buckets=buckets)
    return t.peak(memory_inputs.extra_static_bytes)

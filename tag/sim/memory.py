"""Per-device peak memory over one iteration, in program order: the memory terms of every decision in one place.

Notation, per op group g and device d computing r = rows[g][d] > 0 rows of it (one micro-batch's rows under a
pipeline), n = the group's replicas (devices with rows), z = its ZeRO stage, P = its fp32 weight bytes
(``param_bytes``), G = P its fp32 weight-gradient bytes, S = param_count x optimizer state bytes per parameter
(Adam 8, momentum 4, SGD 0), and c = `tag.strategy.memory_decisions.compute_bytes`(precision) / 4 (1 in fp32 and
tf32; 1/2 under fp16/bf16: the bytes of received slices, which cross devices in 16 bits). Activation figures are at
the dtypes of the precision (`tag.sim.memory_bytes.group_bytes`, by tensor from the dtype pass `tag.graph.autocast`:
under fp16/bf16 autocast only products and convolutions compute in 16 bits; an fp32 bias or norm scale promotes back
to fp32).
A group is *bucketed* when its gradients sum in a bucket: replicated (n > 1), z <= 1, not sharded.

Persistent for the whole iteration (``static``)::

    P / n if z == 3 else P          weights (fp32 master weights under every precision)
  + S / n if z >= 1 else S          optimizer states
  + G if bucketed                   the bucket's flat gradient buffer (kept across steps, as DDP's buckets;
                                    z = 1: the unit's own kept buffer, reduce-scattered, `tag.deploy.zero`)

and per device (``batch_inputs``) its rows of the data inputs for the step (all micro-batches; at their dtype),
bytes per row x rows of the largest reader: a loader holds the step's batch for the whole step.

Saved from g's forward until g's backward (``saved``)::

    out_bytes r + leaf_bytes r      recompute: its outputs (the runtime keeps them as the roots of its backward), its
      + c recv_fwd                  16-bit input leaves (fp16/bf16) and the slices received; its other inputs are
                                    other groups' outputs (data: batch_inputs). Hand-built graphs: in_bytes r
    held_bytes r + held_fixed       otherwise: what it holds (`tag.graph.costs.group_held_bytes`: the distinct
      + c recv_fwd                  storages its ops keep and its outputs, at their dtypes, with autocast's 16-bit
                                    copies and input leaves; data inputs are in batch_inputs) and the slices received

Gradient buffers, allocated at g's backward and kept until the optimizer step (``kept``)::

    0 if bucketed, G / n if z >= 2, else G

Transient while g's forward runs (``fwd_transient``)::

    out_bytes r                     one output-sized temporary (e.g. a Gemm's product before its bias)
  + P if z == 3                     its weights all-gathered (the shard stays; freed after the forward)
  + c P if fp16/bf16 and recompute  the 16-bit weight copies (held in held_bytes otherwise: products save them)

Transient while g's backward runs (``bwd_transient``)::

    out_bytes r + c recv_bwd        its output gradients and the gradient slices it receives
  + in_bytes r                      the gradients of its inputs it hands back
  + P if z == 3                     its weights gathered again
  + largest weight of g             if bucketed, z == 2 or pipelined: autograd computes a weight gradient into a
                                    fresh tensor and adds it into the .grad that exists (a first .grad it keeps)
  + rerun if recompute              what its re-run forward's ops keep (held without the outputs no op keeps)
  + G - G / n if z >= 2             the full gradient until its reduce-scatter (the shard is in kept)
  + sum_{p < g <= last(t)} bytes(t) the output-gradient buffers of earlier groups' outputs t a consumer up to g
                                    filled, waiting for their producer p's backward (residual streams)

The optimizer step (``update_transient``, per device) holds every kept gradient plus Adam's temporaries
(`optimizer_temp_bytes`: torch forms sqrt(v) / bias correction out of place; single-tensor on CPU ranks: 2 x the
largest tensor updated, foreach on GPUs: every updated tensor, P / n under ZeRO >= 1).

With cum_g = the saved bytes of groups <= g (forward order) and kept_from_g = the kept gradients of groups >= g:

    peak = sum_g static_g + max(max_g(cum_g + fwd_transient_g), max_g(cum_g + kept_from_g + bwd_transient_g),
                                sum_g kept_g + update_transient)

Corrections from measurement (benchmarks/memory.md, peak live tensor bytes of `tag deploy` steps on CPU ranks):
the held bytes replace the ops' summed ``saved_bytes_per_row`` (a group's outputs stay until its backward as the
roots of its backward; shared and aliased saved tensors are one storage; the normalisations and MaxPool keep what
the runtime's converters keep); the input gradients of a backward and the optimizer step's temporaries were
missing (mlp: the peak is Adam's step); the deploy runtime frees a group's outputs and leaves after its backward
(`tag.deploy.runtime.RankRuntime._release`; it held them to the end of the step), as frameworks free activations.
Second round: activations at their autocast dtypes, not c x fp32 (bf16 small_cnn -44% -> -3%); bucketed gradients
persistent and the weight-gradient temporary (mlp dp-even -5% -> 0%); graph outputs' gradients in out_bytes; the
output-gradient buffers waiting for their producer (small_transformer dp-even -8% -> 0%); a recomputed group keeps
its outputs, each storage once (an input read by two recomputed groups was counted twice: +9% -> -2.5%).

Received slices (recv_fwd, recv_bwd) are the strategy's transfer pairs (`MemoryInputs.recv`, bytes at the graph's
dtypes, scaled by c). Integer tensors (token ids) are scaled by c too: a small overcount of 16-bit runs, left for
simplicity. ``extra_static`` adds the persistent bytes of shared parameters held where their
owner group is absent. Figures are bytes.

Sharded groups (`Decision.shard`, `tag.sim.shards.shard_memory`): at position j, P, G and S are the device's
share (its weight slices, ``ShardFacts.param_bytes``), n is the group's replicas R, and its saved activations are
scaled by 1 - f (1 - share_j), f the share of the group's activation bytes the split leaves split.

Pipelined strategies (`tag.sim.peak_memory.pipeline_peak_memory_bytes`): the same terms per micro-batch at rows[d] / m rows, with as
many micro-batches' saved bytes held as the stage's schedule keeps in flight, gradient buffers that live from
a group's first backward to the step (accumulation over micro-batches, with the fresh weight-gradient tensor of
every backward after the first), and what a backward pass keeps until it ends (`pass_kept`). ZeRO under a
pipeline follows `tag.sim.zero` (FSDP2 under torch's pipeline schedules): gradients accumulate unsharded (kept = G
at every stage; no per-pass full-gradient transient) and a stage-3 group's weights are gathered once before its
first forward and stay whole until after its last backward (static + P; no per-pass gather transient).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tag.cost.optimizer import FP32_BYTES, state_bytes_per_param
from tag.lru import Recent
from tag.sim.gradsync import shared_params, tensor_bytes
from tag.sim.memory_bytes import cached_group_bytes
from tag.sim.shards import shard_memory
from tag.sim.tensor_sends import cached_cross_tensors
from tag.strategy import Decision
from tag.strategy.memory_decisions import MIXED_PRECISIONS, compute_bytes

LINES_KEPT = 1024  # `rows_peak_lines` answers kept per context (each a few KB: two walks' candidates)


def static_bytes(group, optimizer: str) -> float:
    """Weights plus optimizer states of one group's parameters, bytes."""
    return group.param_bytes + group.param_count * state_bytes_per_param(optimizer)


def shared_static_bytes(gg, devs_of, optimizer: str, n_devices: int) -> list[float]:
    """Per device, ``extra_static``: the persistent bytes of each shared parameter (`tag.sim.gradsync.shared_params`)
    on the devices of the groups reading it where its owner group (the lowest id) is absent: its weights, its
    gradient and its fp32 optimizer states, 2 x bytes + bytes / 4 x the state bytes per parameter. devs_of[g]:
    the devices of group g (none for a group not placed yet)."""
    extra = [0.0] * n_devices
    for pname, gids in shared_params(gg).items():
        nbytes = tensor_bytes(gg, pname)
        owner = set(devs_of[gids[0]])
        for d in sorted({d for g in gids for d in devs_of[g]} - owner):
            extra[d] += 2 * nbytes + nbytes / FP32_BYTES * state_bytes_per_param(optimizer)
    return extra


@dataclass
class MemoryTerms:
    """The per group x device terms of the module docstring, bytes (groups x devices arrays; 0 where not hosted)."""

    static: np.ndarray
    saved: np.ndarray
    kept: np.ndarray
    fwd_transient: np.ndarray
    bwd_transient: np.ndarray
    update_transient: np.ndarray  # per device: the optimizer step's temporaries
    batch_inputs: np.ndarray  # per device: its rows of the data inputs, held for the whole step
    pass_kept: np.ndarray | None = None  # per device, pipelined: what a backward pass keeps until it ends

    def walk(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The walk of the module docstring, groups x devices: (cum_g + fwd_transient_g, cum_g + kept_from_g +
        bwd_transient_g, cum_g)."""
        cum = np.cumsum(self.saved, axis=0)
        kept_from = np.cumsum(self.kept[::-1], axis=0)[::-1]
        return cum + self.fwd_transient, cum + kept_from + self.bwd_transient, cum

    def peak_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per device: (A = all saved bytes of one pass, max_g(cum_g + fwd_transient_g),
        max_g(cum_g + kept_from_g + bwd_transient_g), all kept bytes). The optimizer step's peak is all kept
        bytes + update_transient."""
        n_dev = self.saved.shape[1]
        if not len(self.saved):
            z = np.zeros(n_dev)
            return z, z, z, z
        fwd, bwd, cum = self.walk()
        return cum[-1], fwd.max(axis=0), bwd.max(axis=0), self.kept.sum(axis=0)

    def persistent(self, extra_static=0.0) -> np.ndarray:
        """Per device, the bytes held for the whole step: every group's static bytes, the data inputs and
        `extra_static` (shared parameters held where their owner group is absent)."""
        return self.static.sum(axis=0) + self.batch_inputs + np.asarray(extra_static, dtype=float)

    def peak(self, extra_static=0.0) -> np.ndarray:
        """Peak bytes per device of one pass without pipelining (module docstring): persistent + max(the
        forward walk, the backward walk, all kept gradients + the optimizer step's temporaries, 0)."""
        _, fwd_peak, bwd_peak, all_kept = self.peak_parts()
        return self.persistent(extra_static) + np.maximum.reduce(
            [fwd_peak, bwd_peak, all_kept + self.update_transient, np.zeros_like(fwd_peak)])


@dataclass
class PeakLines:
    """The peak bytes of one device as a function of the rows r >= 1 it computes of each hosted group:
    persistent(r) + max(max_i(intercept_i + slope_i r), 0), every walk candidate of `MemoryTerms` (the forward
    and backward walks' and the optimizer step's) a line in r once a device hosts its groups (each term is
    row x r + fixed, received bytes scaled alike)."""

    fixed: float  # persistent bytes regardless of rows
    per_row: float  # persistent bytes per row (the data inputs)
    intercepts: np.ndarray
    slopes: np.ndarray

    def bound(self) -> tuple[float, float]:
        """(fixed, per_row) with peak(r) <= fixed + per_row x r for r >= 1 (exact where one candidate dominates)."""
        return (self.fixed + max(float(self.intercepts.max(initial=0.0)), 0.0),
                self.per_row + max(float(self.slopes.max(initial=0.0)), 0.0))

    def max_rows(self, budget: float, limit: int) -> int:
        """The most rows r <= limit with peak(r) <= budget (exact: each candidate's line within the budget), 0 when
        not even one row fits."""
        room = budget - self.fixed - np.append(self.intercepts, 0.0)
        slope = self.per_row + np.append(self.slopes, 0.0)
        if np.any(room < 0.0):
            return 0
        rising = slope > 0
        cap = int(np.floor((room[rising] / slope[rising]).min())) if rising.any() else limit
        return max(0, min(limit, cap))


def peak_lines(one: MemoryTerms, two: MemoryTerms, device: int = 0) -> PeakLines:
    """`PeakLines` of `device` from the terms of the same decisions at 1 and 2 rows on each hosted device:
    each candidate's slope is c(2) - c(1) and its intercept c(1) - slope."""
    def candidates(t: MemoryTerms) -> tuple[float, np.ndarray]:
        fwd, bwd, _ = t.walk()
        return (float(t.persistent()[device]),
                np.concatenate([fwd[:, device], bwd[:, device], [t.kept[:, device].sum() + t.update_transient[device]]]))

    p1, c1 = candidates(one)
    p2, c2 = candidates(two)
    return PeakLines(p1 - (p2 - p1), p2 - p1, c1 - (c2 - c1), c2 - c1)


def rows_peak_lines(ctx, groups, d: int, precision: str = "fp32") -> PeakLines:
    """`PeakLines` of device d computing r >= 1 rows of every group of `groups` (`memory_terms` at 1 and 2
    rows): each group replicated (a view of
    d twice: its gradients in a bucket for the whole step, an upper bound of one replica's), receiving the
    tensors that groups outside `groups` make and the gradients of its tensors that they read (r rows and the
    unbatched bytes each, as from another device; each tensor once, `tag.graph.coarsen.cross_tensors`).
    They depend on d only through its device type: kept per context for the last LINES_KEPT (groups, type,
    precision) asked (the pipeline search asks for the same stage on the same type many times)."""
    memo = getattr(ctx, "_rows_peak_lines", None)
    if not isinstance(memo, Recent):
        memo = ctx._rows_peak_lines = Recent(LINES_KEPT)
    key = (tuple(groups), ctx.dtypes[d], precision)
    got = memo.get(key)
    return got if got is not None else memo.put(key, _rows_peak_lines(ctx, groups, d, precision))


def _rows_peak_lines(ctx, groups, d: int, precision: str) -> PeakLines:
    return peak_lines(rows_terms(ctx, groups, d, 1, precision), rows_terms(ctx, groups, d, 2, precision))


def rows_terms(ctx, groups, d: int, r: int, precision: str = "fp32") -> MemoryTerms:
    """The `memory_terms` `rows_peak_lines` reads at r rows: every group of `groups` at r rows on a view of device d
    twice, the others on neither, receiving what crosses into and out of `groups` at r rows."""
    gg = ctx.gg
    inside = set(groups)
    dec, off = Decision((r, r)), Decision((0, 0))
    recv_fwd, recv_bwd = np.zeros((gg.n_groups, 2)), np.zeros((gg.n_groups, 2))
    for t in cached_cross_tensors(ctx):  # a tensor crosses once (`tag.sim.tensor_sends`): held by its lowest reader
        readers = [h for h in t.dsts if h in inside]
        b = t.bytes_per_row * r + t.bytes_fixed
        if t.src not in inside and readers:
            recv_fwd[readers[0]] += b
        elif t.src in inside and len(readers) < len(t.dsts):
            recv_bwd[t.src] += b
    decisions = [dec if g in inside else off for g in range(gg.n_groups)]
    return memory_terms(ctx, decisions, None, ctx.training.optimizer, precision, devices=[d, d],
                        received=(recv_fwd, recv_bwd))


def group_lines_bytes(ctx, precision: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
    """Per group, (fixed, per_row): the bytes it keeps whole on one device computing r >= 1 rows, nothing
    received (`memory_terms`' static + saved + kept gradient, a line in r: fixed + per_row x r)."""
    k = ctx.gg.n_groups
    one, two = (memory_terms(ctx, [Decision((r,))] * k, None, ctx.training.optimizer, precision, devices=[0])
                for r in (1, 2))
    b1, b2 = ((t.static + t.saved + t.kept)[:, 0] for t in (one, two))
    return b1 - (b2 - b1), b2 - b1


def device_is_cpu(dtypes) -> np.ndarray:
    """Per device type of `dtypes`: True for a CPU rank (its optimizer runs torch's single-tensor loop)."""
    return np.array([getattr(t, "kind", "gpu") == "cpu" for t in dtypes], dtype=bool)


def optimizer_temp_bytes(cpu: np.ndarray, optimizer: str, updated: np.ndarray,
                         largest_updated: np.ndarray) -> np.ndarray:
    """Per device, the temporaries of its optimizer step, bytes. torch's Adam forms sqrt(v) / bias correction
    out of place: its single-tensor loop (the default for CPU tensors, `cpu`) holds two tensors the size of the
    one parameter it updates, so 2 x the largest (`largest_updated`); its multi-tensor (foreach) form, the default
    on GPUs, one per parameter at once, so the bytes it updates (`updated`). SGD and momentum update in place: 0."""
    if optimizer != "adam":
        return np.zeros_like(updated)
    return np.where(cpu, 2.0 * largest_updated, updated)


def received_bytes(recv, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(recv_fwd, recv_bwd), groups x devices, of transfer pairs (consumer group, consumer device, producer group,
    producer device, bytes): the consumer receives the activations, the producer their gradients."""
    recv_fwd, recv_bwd = np.zeros(shape), np.zeros(shape)
    if recv:
        cg, cd, pg, pd, b = (np.array(x) for x in zip(*recv))
        np.add.at(recv_fwd, (cg, cd), b)
        np.add.at(recv_bwd, (pg, pd), b)
    return recv_fwd, recv_bwd


def memory_terms(ctx, decisions, recv, optimizer: str, precision: str = "fp32",
                 pipelined: bool = False, micro_batches: int = 1, devices=None, received=None,
                 buckets=(), groups=None) -> MemoryTerms:
    """The module docstring's terms for `decisions` at their rows (one micro-batch's rows under a pipeline).

    recv: (consumer group, consumer device, producer group, producer device, bytes) per transfer pair; the
    consumer receives activations in forward and the producer receives gradients in backward (or `received`:
    their `received_bytes` arrays). pipelined: the ZeRO terms of gradient accumulation
    (`pipeline_peak_memory_bytes`); micro_batches: how many such row maps the step's data inputs hold.
    devices: the device indices the decisions' rows run over (default: all of ctx's, in topology order); a view
    of some devices counts a group's replicas among them only, so it equals the whole strategy's columns when
    every group's devices are among them (whole-group placements: one device each). buckets: the groups of each
    gradient bucket; a ZeRO 2-3 bucket's full gradients wait for its one reduce-scatter after its lowest group's
    backward (`tag.deploy.zero`), so at g's backward those of the bucket's groups above g are held too.
    groups: the graph indices (increasing) that `decisions` (and `received`'s rows) are of, when not every group:
    the terms of those rows only (`GroupBytes.subset`). Every term is 0 on a device a group does not run on, so
    the terms of the groups a view's devices host give those devices the same peaks as all groups' (unsharded
    decisions, no buckets: they name groups by index).
    """
    rows = np.array([d.rows for d in decisions], dtype=float)  # groups x devices
    hosted = rows > 0
    gb = cached_group_bytes(ctx, precision)
    param_bytes, static_bytes = ctx.param_bytes, ctx.static_bytes
    if groups is not None:
        if buckets or any(d.shard is not None for d in decisions):
            raise ValueError("memory_terms: a subset of groups takes unsharded decisions and no buckets")
        idx = np.asarray(groups, dtype=int)
        gb, param_bytes, static_bytes = gb.subset(idx), param_bytes[idx], static_bytes[idx]
    c = compute_bytes(precision) / FP32_BYTES
    recv_fwd, recv_bwd = received if received is not None else received_bytes(recv, rows.shape)
    dtypes = ctx.dtypes if devices is None else [ctx.dtypes[d] for d in devices]
    if devices is not None and any(d.shard is not None for d in decisions):
        raise ValueError("memory_terms: a view of some devices takes unsharded decisions only")
    zero = np.array([d.zero for d in decisions], dtype=int)[:, None]
    recompute = np.array([d.recompute for d in decisions], dtype=bool)[:, None]
    inv_n = 1.0 / np.maximum(hosted.sum(axis=1, keepdims=True), 1)
    p = param_bytes[:, None]
    states = (static_bytes - param_bytes)[:, None]

    def per(row, fixed):
        return row[:, None] * rows + fixed[:, None] * hosted

    held, out = per(gb.held_row, gb.held_fixed), per(gb.out_row, gb.out_fixed)
    rerun = held if gb.rerun_row is None else per(gb.rerun_row, gb.rerun_fixed)
    sharded = shard_memory(ctx, decisions, p, states, inv_n)  # weights and split activations at the shares
    if sharded is not None:
        p, states, inv_n, act = sharded
        held, out, rerun = held * act, out * act, rerun * act
    if gb.leaf_row is None:  # hand-built: the inputs it keeps stand for what the group keeps
        kept_inputs = per(gb.in_row, gb.in_fixed)
    else:  # its outputs (the runtime keeps them until its backward) and its 16-bit input leaves
        kept_inputs = out + per(gb.leaf_row, gb.leaf_fixed) + c * recv_fwd
    saved = np.where(recompute, kept_inputs, held + c * recv_fwd)
    in_grads = per(gb.in_row, gb.in_fixed)
    z3, z2 = (zero == 3) & ~pipelined, (zero >= 2) & ~pipelined  # per pass; pipelined: whole for the step
    # gradients that sum in a bucket (replicated, ZeRO 0-1, not sharded) live in its flat buffer for good
    shard = np.array([d.shard is not None for d in decisions], dtype=bool)[:, None]
    bucketed = (hosted.sum(axis=1, keepdims=True) > 1) & (zero <= 1) & ~shard
    static = (np.where(zero == 3, p * inv_n, p) + np.where(zero >= 1, states * inv_n, states)
              + np.where((zero == 3) & pipelined, p, 0.0) + np.where(bucketed, p, 0.0)) * hosted
    # the step's rows of the data inputs, held for the whole step (the largest reader's, for all micro-batches)
    batch_inputs = per(gb.data_row * micro_batches, gb.data_fixed).max(axis=0, initial=0.0)
    kept = np.where(bucketed, 0.0, np.where(z2, p * inv_n, p)) * hosted
    # the 16-bit weight copies are held (in `held`) unless the group recomputes: then its forward makes them anew
    copies = np.where(recompute, c * p, 0.0) if precision in MIXED_PRECISIONS else 0.0
    fwd = out + (np.where(z3, p, 0.0) + copies) * hosted
    # autograd computes a weight's gradient into a fresh tensor and adds it into a .grad that already exists (a
    # bucket's or ZeRO-2's flat buffer, or accumulated over micro-batches); the first .grad it would keep instead
    accumulates = pipelined and micro_batches > 1
    grad_temp = np.where(bucketed | (zero == 2) | accumulates, np.minimum(gb.largest_param[:, None], p), 0.0)
    full = np.where(z2, p - p * inv_n, 0.0) * hosted  # a group's full gradient beyond its shard's
    bwd = (out + in_grads + c * recv_bwd + (np.where(z3, p, 0.0) + grad_temp) * hosted
           + np.where(recompute, rerun, 0.0) + full)
    for gs in buckets:  # a ZeRO 2-3 bucket's full gradients wait for its reduce-scatter (docstring)
        for g in gs:
            bwd[g] += sum((full[h] for h in gs if h > g), np.zeros_like(full[g]))
    if gb.wait_row is not None:  # output-gradient buffers a consumer filled, until their producer's backward
        bwd = bwd + (gb.wait_row @ rows + gb.wait_fixed @ hosted.astype(float)) * hosted
    updated = np.where(zero >= 1, p * inv_n, p) * hosted
    largest = np.where(zero >= 1, p * inv_n, gb.largest_param[:, None]) * hosted
    opt = optimizer_temp_bytes(device_is_cpu(dtypes), optimizer, updated.sum(axis=0),
                               largest.max(axis=0, initial=0.0))
    pass_kept = np.zeros(rows.shape[1])
    if accumulates:  # (one micro-batch: the plain step, `pipeline_peak_memory_bytes`)
        # the pipeline runtime drops a micro-batch's outputs, input leaves and their gradients when its backward
        # pass ends, not after each group's backward: at g's backward those of the groups after g stay
        linger = (out + c * recv_fwd + in_grads) * hosted
        bwd = bwd + np.cumsum(linger[::-1], axis=0)[::-1] - linger
        pass_kept = linger.sum(axis=0)
    return MemoryTerms(static, saved, kept, fwd, bwd, opt, batch_inputs, pass_kept)


def peak_memory_bytes(ctx, decisions, recv, optimizer: str, extra_static, precision: str = "fp32",
                      devices=None, received=None, groups=None) -> np.ndarray:
    """Peak bytes per device (topology order, or of `devices`: `memory_terms`) for a strategy without pipelining
    (module docstring); `groups`: `memory_terms`' subset."""
    t = memory_terms(ctx, decisions, recv, optimizer, precision, devices=devices, received=received, groups=groups)
    return t.peak(extra_static)

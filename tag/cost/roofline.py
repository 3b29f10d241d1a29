"""The roofline cost model: per-op max(FLOPs / (peak x efficiency), bytes / memory bandwidth) + launch.

For a group g on a device type for r rows:

    fwd_ms(g, r) = sum over compute ops o of g of
                   max(F_o(r) / (peak_o x eff_o), s x M_o(r) / (mem_bw x bw(s x M_o(r)))) + launch_ms
                   + cast_ms(o)
    F_o(r) = fwd_flops_per_row x r + fwd_flops_fixed,  M_o(r) = mem_bytes_per_row x r + mem_bytes_fixed

``eff_o`` and the bandwidth fraction ``bw`` come from `tag.cost.efficiency` (per op class, size and arithmetic
intensity; one parameter set per device kind). ``peak_o`` comes from the training precision (`peak_flops_per_ms`):
fp32 uses the device's FP32 peak, tf32 and fp16 / bf16 the catalog's TF32 / 16-bit tensor-core peaks for conv and
matmul ops, each times its fitted fraction (`EfficiencyParams.peak_fraction`). ``s`` and ``cast_ms`` are the
mixed-precision terms of `tag.cost.mixed_precision`: s = 1/2 under fp16 / bf16 (16-bit activations and weight
copies; 1 otherwise), and a conv / matmul op with weights runs one cast kernel per weight tensor in each phase,
cast_ms = P_o x 6 / (mem_bw x bw(P_o x 6)) + tensors x launch_ms for its P_o weight elements (0 otherwise).

Backward uses the backward FLOPs and twice the forward memory traffic (read the output gradient and the
saved activations, write the input gradient; weight-gradient ops read the weights and write their
gradient), with two kernels for ops that own parameters (input and weight gradient) and one otherwise;
ops that neither compute nor move bytes (views, shape arithmetic) launch no kernel.
Ops that only generate weights (`Op.is_weight_generator`) cost nothing. The optimizer update is
memory-bound: ``param_count x (update_traffic_bytes_per_param + loss_scaling_bytes_per_param) / (mem_bw x
bandwidth fraction)`` plus one launch per parameter tensor (fp16's loss-scale unscale pass adds 8 bytes per
element). Results are cached per (group, device type name, rows); a phase's per-op times are evaluated over
every group's ops at once for a (device type, rows) and each group reads its slice, as callers ask many groups at
one row count.
"""

from __future__ import annotations

import numpy as np

from tag.cost.efficiency import (TENSOR_CORE_CLASSES, EfficiencyParams, bandwidth_fraction, efficiency_array,
                                 params_for, winograd_eligible)
from tag.cost.mixed_precision import (LAYOUTS, cast_bytes_per_param, layout_transpose_factor,
                                      loss_scaling_bytes_per_param, traffic_scale)
from tag.cost.optimizer import update_traffic_bytes_per_param
from tag.graph.groups import GroupGraph
from tag.lru import Recent
from tag.strategy import TrainingConfig
from tag.strategy.memory_decisions import peak_class
from tag.topology.cluster import DeviceType

GPU_LAUNCH_US = params_for("gpu").launch_us  # CUDA kernel launch + framework dispatch per kernel
CPU_LAUNCH_US = params_for("cpu").launch_us  # PyTorch eager CPU op dispatch (aten op on a tiny tensor: 2-4 us)
BWD_MEM_FACTOR = 2.0  # backward memory traffic relative to forward
VECTORS_KEPT = 64  # all-ops time vectors kept per cost model (`RooflineCostModel._group_op_ms`), least recent dropped
_PRECISION_PEAK_KEY = {"tf32": "tf32_tflops", "amp": "amp_tflops"}


def launch_ms(device: DeviceType, params: EfficiencyParams | None = None) -> float:
    """Per-kernel launch overhead on a device, ms (`EfficiencyParams.launch_us` of its kind)."""
    return (params or params_for(device.kind)).launch_us / 1e3


def peak_flops_per_ms(device: DeviceType, precision: str, op_classes, tensor_core_fraction=1.0) -> np.ndarray:
    """Peak FLOP per ms for each op class under a training precision (`tag.strategy.memory_decisions.peak_class`:
    "fp32", "tf32", or "amp" for fp16 / bf16 mixed precision).

    fp32: the device's FP32 peak for every op. tf32 / amp: conv and matmul ops use the catalog's
    `extra["tf32_tflops"]` / `extra["amp_tflops"]` peak x `tensor_core_fraction` (a number, or a dict per
    op class: `EfficiencyParams.peak_fraction` of the precision's peak class) when the device records one (else
    the FP32 peak); other ops stay on the FP32 pipes.

    >>> from tag.topology.catalog import CATALOG
    >>> [float(x) / 1e9 for x in peak_flops_per_ms(CATALOG["A100-40GB"], "bf16", ["matmul", "norm"], 0.5)]
    [156.0, 19.5]
    """
    fp32 = flops_per_ms(device)
    key = _PRECISION_PEAK_KEY.get(peak_class(precision))
    tc = device.extra.get(key) if key else None
    if not tc:
        return np.full(len(op_classes), fp32)
    frac = tensor_core_fraction if isinstance(tensor_core_fraction, dict) else {}
    default = 1.0 if isinstance(tensor_core_fraction, dict) else float(tensor_core_fraction)
    return np.array([tc * 1e9 * frac.get(c, default) if c in TENSOR_CORE_CLASSES else fp32 for c in op_classes],
                    dtype=float)


def flops_per_ms(device: DeviceType) -> float:
    """Peak FLOP per ms of a device type."""
    return device.peak_tflops * 1e12 / 1e3


def mem_bytes_per_ms(device: DeviceType) -> float:
    """Memory bandwidth in bytes per ms (memory_bandwidth_gbps is 10^9 bits/s)."""
    return device.memory_bandwidth_gbps * 1e9 / 8 / 1e3


def roofline_ms(flops: np.ndarray, mem_bytes: np.ndarray, eff: np.ndarray, device: DeviceType,
                bw_fraction=1.0, peak_per_ms=None) -> np.ndarray:
    """Per-op roofline time in ms, without launch overhead: max(flops / (peak x eff), bytes / (bw x bw_fraction)).

    `peak_per_ms` (FLOP/ms, scalar or per op) defaults to the device's FP32 peak."""
    peak = flops_per_ms(device) if peak_per_ms is None else peak_per_ms
    return np.maximum(flops / (peak * eff), mem_bytes / (mem_bytes_per_ms(device) * bw_fraction))


def ops_mask(compute_ops: list[int], op_ids) -> np.ndarray:
    """Boolean mask over a group's compute ops (graph indices): which are in `op_ids`."""
    chosen = set(op_ids)
    return np.array([i in chosen for i in compute_ops], dtype=bool)


def _launches(op) -> bool:
    """Whether an op runs a device kernel: it computes FLOPs or moves bytes."""
    return (op.fwd_flops_per_row or op.fwd_flops_fixed or op.bwd_flops_per_row or op.bwd_flops_fixed
            or op.mem_bytes_per_row or op.mem_bytes_fixed) > 0


class _GroupOps:
    """The compute ops of one group as arrays (per-row and fixed FLOPs and bytes)."""

    def __init__(self, ops):
        self.classes = [o.op_class for o in ops]
        self.fwd_fpr = np.array([o.fwd_flops_per_row for o in ops], dtype=float)
        self.fwd_ffix = np.array([o.fwd_flops_fixed for o in ops], dtype=float)
        self.bwd_fpr = np.array([o.bwd_flops_per_row for o in ops], dtype=float)
        self.bwd_ffix = np.array([o.bwd_flops_fixed for o in ops], dtype=float)
        self.mpr = np.array([o.mem_bytes_per_row for o in ops], dtype=float)
        self.mfix = np.array([o.mem_bytes_fixed for o in ops], dtype=float)
        self.n_ops = len(ops)
        # Ops that move no bytes and compute nothing (Shape, Reshape, Unsqueeze: views and host-side shape
        # arithmetic) launch no kernel.
        runs = np.array([1.0 if _launches(o) else 0.0 for o in ops])
        self.winograd = np.array([winograd_eligible(o) for o in ops], dtype=bool)
        self.fwd_kernels = runs
        self.bwd_kernels = runs * np.array([2.0 if o.params else 1.0 for o in ops])
        # weight casts under mixed precision (conv / matmul ops): weight elements and tensors per op
        tc = np.array([o.op_class in TENSOR_CORE_CLASSES for o in ops], dtype=bool)
        self.cast_params = np.where(tc, np.array([float(o.param_count) for o in ops]), 0.0)
        self.cast_tensors = np.where(tc & (self.cast_params > 0), np.array([float(len(o.params)) for o in ops]), 0.0)
        self.conv = np.array([o.op_class == "conv" for o in ops], dtype=bool)  # layout transposes under amp


class RooflineCostModel:
    """Roofline compute times for the groups of one GroupGraph (implements `tag.cost.base.CostModel`).

    >>> # cm = RooflineCostModel(gg, TrainingConfig()); cm.group_fwd_ms(0, device_type, 16)
    """

    name = "roofline"

    def __init__(self, gg: GroupGraph, training: TrainingConfig, params: dict | None = None, conv_layout: str = "nhwc"):
        self.gg = gg
        self.training = training
        self.params = dict(params or {})  # device kind -> EfficiencyParams; default `params_for(kind)`
        if conv_layout not in LAYOUTS:
            raise ValueError(f"convolution layout {conv_layout!r}: expected one of {', '.join(LAYOUTS)}")
        self.conv_layout = conv_layout  # memory format of convolution activations; costs only under fp16 / bf16
        ops = gg.graph.ops
        self.compute_ops = [[i for i in g.op_ids if not ops[i].is_weight_generator] for g in gg.groups]
        self._groups = [_GroupOps([ops[i] for i in ids]) for ids in self.compute_ops]
        # every group's compute ops in one array, group after group: group g's are _all[_span[g]:_span[g + 1]]
        self._all = _GroupOps([ops[i] for ids in self.compute_ops for i in ids])
        self._span = np.concatenate([[0], np.cumsum([len(ids) for ids in self.compute_ops])]).astype(int).tolist()
        self._vectors: Recent = Recent(VECTORS_KEPT)  # (phase, device name, rows, share) -> all ops' op_ms
        self._cache: dict[tuple, float] = {}

    def op_ms(self, gid: int, device: DeviceType, rows: int, phase: str, share: float = 1.0) -> np.ndarray:
        """Per-op time (roofline + launches) of the compute ops of group `gid`, phase "fwd" or "bwd", ms.

        `share` < 1: each op runs on that fraction of its width (a tensor shard's slice): F_o and M_o (and the
        cast bytes) times `share`, the efficiency read at those smaller sizes, the kernel launches whole, since
        every device of a shard launches each kernel once."""
        return self._ops_time_ms(self._groups[gid], device, rows, phase, share)

    def _ops_time_ms(self, go: _GroupOps, device: DeviceType, rows: int, phase: str, share: float) -> np.ndarray:
        """`op_ms` of the ops `go`: every term is elementwise in the ops, so the ops of several groups in one
        array give each op the time its own group's call gives it."""
        factor = 1.0 if phase == "fwd" else BWD_MEM_FACTOR
        if phase == "fwd":
            flops = share * (go.fwd_fpr * rows + go.fwd_ffix)
            kernels = go.fwd_kernels
        else:
            flops = share * (go.bwd_fpr * rows + go.bwd_ffix)
            kernels = go.bwd_kernels
        mem = share * factor * (go.mpr * rows + go.mfix)
        p = self.params_for(device.kind)
        precision = getattr(self.training, "precision", "fp32")
        mem = mem * traffic_scale(precision)
        eff = efficiency_array(go.classes, device.kind, flops, mem, p)
        if p.winograd_speedup != 1.0 and precision == "fp32" and go.winograd.any():
            eff = np.where(go.winograd, eff * p.winograd_speedup, eff)
        peak = peak_flops_per_ms(device, precision, go.classes, p.peak_fraction(peak_class(precision)))
        t = roofline_ms(flops, mem, eff, device, bandwidth_fraction(mem, device.kind, p), peak)
        return t + kernels * launch_ms(device, p) + self._side_kernels_ms(go, device, rows, factor, precision, p,
                                                                            share)

    def _side_kernels_ms(self, go: _GroupOps, device: DeviceType, rows: int, factor: float, precision: str,
                         p: EfficiencyParams, share: float = 1.0) -> np.ndarray:
        """Per-op time of the memory-bound kernels mixed precision adds to one phase (`tag.cost.mixed_precision`),
        ms: weight casts (conv / matmul weights, 6 bytes per element, one kernel per tensor) and, for NCHW
        convolutions, layout transposes (`layout_transpose_factor` x the conv's 16-bit activation traffic of the
        phase, that many kernels x `factor`); 0 under fp32 / tf32."""
        per_param = cast_bytes_per_param(precision)
        if not per_param:
            return np.zeros(go.n_ops)
        nbytes = go.cast_params * per_param
        launches = go.cast_tensors.copy()
        transpose = layout_transpose_factor(precision, self.conv_layout)
        if transpose and go.conv.any():
            nbytes = nbytes + np.where(go.conv, transpose * factor * traffic_scale(precision) * go.mpr * rows, 0.0)
            launches = launches + np.where(go.conv, transpose * factor, 0.0)
        nbytes = share * nbytes
        bw = mem_bytes_per_ms(device) * bandwidth_fraction(nbytes, device.kind, p)
        return np.where(nbytes > 0, nbytes / bw, 0.0) + launches * launch_ms(device, p)

    def params_for(self, kind: str) -> EfficiencyParams:
        """The efficiency parameters this model uses for a device kind."""
        return self.params.get(kind) or params_for(kind)

    def _phase_ms(self, gid: int, device: DeviceType, rows: int, phase: str) -> float:
        key = (phase, gid, device.name, rows)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if rows <= 0 or self._groups[gid].n_ops == 0:
            t = 0.0
        else:
            t = float(self._group_op_ms(gid, device, rows, phase).sum())
        self._cache[key] = t
        return t

    def _group_op_ms(self, gid: int, device: DeviceType, rows: int, phase: str, share: float = 1.0) -> np.ndarray:
        """`op_ms(gid, ...)`, read from one evaluation over every group's ops at these (phase, device, rows, share),
        kept for the next groups asked at the same ones (callers ask many groups at one row count): the same
        values (`_ops_time_ms`), and a contiguous slice sums as the array `op_ms` returns does."""
        key = (phase, device.name, rows, share)
        vec = self._vectors.get(key)
        if vec is None:
            vec = self._vectors.put(key, self._ops_time_ms(self._all, device, rows, phase, share))
        return vec[self._span[gid]:self._span[gid + 1]]

    def ops_ms(self, gid: int, device: DeviceType, rows: int, phase: str, op_ids, share: float = 1.0) -> float:
        """The part of group `gid`'s phase time ("fwd" or "bwd") that the ops `op_ids` (graph indices) take, ms:
        the sum of their `op_ms` (all of them sum to `group_fwd_ms` / `group_bwd_ms`); with `share` < 1, on that
        fraction of their width (`op_ms`)."""
        if rows <= 0 or not self._groups[gid].n_ops:
            return 0.0
        return float(self._group_op_ms(gid, device, rows, phase, share)[ops_mask(self.compute_ops[gid], op_ids)].sum())

    def launch_floor_ms(self, gid: int, device: DeviceType) -> float:
        """What group `gid`'s forward costs at least on one device of this type, whatever its rows or shard share,
        ms: `op_ms` at share 0 (its kernel and cast launches; every other term is >= 0 and grows with the work).
        Its backward launches at least as many kernels (one more per op with weights), and sufficient-factor
        broadcasting moves only a weight-gradient kernel out of it, so this bounds the backward too."""
        return float(self.op_ms(gid, device, 1, "fwd", 0.0).sum()) if self._groups[gid].n_ops else 0.0

    def group_fwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Forward time of a group for `rows` rows on one device of this type, ms."""
        return self._phase_ms(group_id, device, rows, "fwd")

    def group_bwd_ms(self, group_id: int, device: DeviceType, rows: int) -> float:
        """Backward time (input and weight gradients) of a group, ms."""
        return self._phase_ms(group_id, device, rows, "bwd")

    def update_ms(self, group_id: int, device: DeviceType) -> float:
        """Optimizer update of the group's parameters on one replica (memory-bound), ms."""
        key = ("upd", group_id, device.name, 0)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        g = self.gg.groups[group_id]
        if g.param_count <= 0:
            t = 0.0
        else:
            precision = getattr(self.training, "precision", "fp32")
            traffic = g.param_count * (update_traffic_bytes_per_param(self.training.optimizer)
                                       + loss_scaling_bytes_per_param(precision))
            p = self.params_for(device.kind)
            frac = float(bandwidth_fraction([traffic], device.kind, p)[0])
            t = traffic / (mem_bytes_per_ms(device) * frac) + max(len(g.params), 1) * launch_ms(device, p)
        self._cache[key] = t
        return t

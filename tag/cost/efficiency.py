"""Roofline efficiency: the fraction of a device's peak FLOP/s and memory bandwidth an op reaches.

One set of named parameters per device kind, shared by every model and every device of that kind, so
calibration fits them in one place. For an op of class c with F FLOPs and M bytes of memory traffic:

    compute efficiency  eff = e_max[c] x F / (F + half_size_flops) x min(1, (F / M) / knee_intensity)
    bandwidth fraction  bw  = mem_efficiency x M / (M + half_size_bytes)
    time                    = max(F / (peak x eff), M / (mem_bw x bw)) + kernels x launch_us

* ``e_max`` (``base``): the fraction of peak a large, compute-dense kernel of the class reaches (cuDNN
  convolutions and cuBLAS GEMMs run near peak; elementwise and normalisation kernels are memory-bound, so
  their compute efficiency barely matters).
* the size factor: small kernels do not fill the device's SMs (half of ``e_max`` at ``half_size_flops``).
* the intensity factor: below ``knee_intensity`` FLOP per byte a kernel (a 1x1 convolution on few
  channels, a skinny GEMM) is starved by operand traffic before it meets the bandwidth roofline.
* ``mem_efficiency``: streaming kernels reach a fixed fraction of the datasheet bandwidth; the size factor
  ``M / (M + half_size_bytes)`` is the latency of a short kernel expressed as bytes it could have moved.
* ``launch_us``: CUDA launch plus framework dispatch per kernel.
* ``winograd_speedup``: cuDNN runs FP32 3x3 stride-1 convolutions with Winograd transforms, which do
  fewer multiplies than the direct convolution the graph's FLOPs count; their efficiency is multiplied by
  this factor (may exceed 1; `winograd_eligible` says which ops; FP32 pipes only).
* ``tensor_core_fraction``: under tf32, conv and matmul ops run against the TF32 tensor-core peak times
  this per-class fraction (tensor-core kernels are starved by operand bandwidth long before the datasheet
  peak; implicit-GEMM convolutions more than plain GEMMs).
* ``amp_fraction``: the same under fp16 / bf16 mixed precision, against the catalog's ``amp_tflops`` peak
  (fitted on its own rows: the 16-bit peak is twice the TF32 one, so operand traffic starves it sooner).

``half_intensity`` is the older saturating intensity factor ``AI / (AI + half_intensity)``, kept for
callers that set it; every zero disables its factor. `tag.topology.catalog` records where the fitted
GPU figures came from (the published single-GPU throughput rows, `benchmarks/published.py --fit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

# Fraction of peak reached by large kernels, per op class (OpGraph.Op.op_class). conv and matmul are fitted
# in GPU_PARAMS; the memory-bound classes keep nominal values (their time is the bandwidth term).
_GPU_BASE = {
    "conv": 0.60, "matmul": 0.70, "norm": 0.25, "elementwise": 0.25, "reduce": 0.25, "pool": 0.30,
    "softmax": 0.25, "gather": 0.20, "data_movement": 0.20, "shape": 0.20, "other": 0.30,
    "rnn": 0.40,  # nominal: one small GEMM per step, not fitted
}
# One CPU core with vectorised kernels (oneDNN / MKL GEMM reach about 70 % of a core's FMA peak).
_CPU_BASE = {
    "conv": 0.50, "matmul": 0.60, "norm": 0.20, "elementwise": 0.20, "reduce": 0.20, "pool": 0.25,
    "softmax": 0.20, "gather": 0.15, "data_movement": 0.15, "shape": 0.15, "other": 0.25,
    "rnn": 0.30,  # nominal, not fitted
}
# Op classes whose kernels run on tensor cores under tf32 / amp (the others stay on the FP32 pipes).
TENSOR_CORE_CLASSES = frozenset({"conv", "matmul"})


@dataclass(frozen=True)
class EfficiencyParams:
    """Named parameters of the efficiency model (one set per device kind; see the module docstring)."""

    base: dict = field(default_factory=lambda: dict(_GPU_BASE))  # e_max per op class
    half_size_flops: float = 0.0  # FLOPs at which a kernel reaches half its class efficiency; 0 = off
    half_intensity: float = 0.0  # saturating intensity factor AI / (AI + half_intensity); 0 = off
    floor: float = 0.01  # never below this fraction of peak
    knee_intensity: float = 0.0  # FLOP/byte below which compute efficiency falls linearly; 0 = off
    mem_efficiency: float = 1.0  # fraction of datasheet memory bandwidth streaming kernels reach
    half_size_bytes: float = 0.0  # bytes at which a kernel reaches half of mem_efficiency; 0 = off
    launch_us: float = 5.0  # per-kernel launch + dispatch, us
    winograd_speedup: float = 1.0  # FP32 3x3 stride-1 convolutions: effective FLOP-rate gain of Winograd; 1 = off
    # per tensor-core class: scales the tf32 tensor-core peak (operand traffic limits MMA kernels)
    tensor_core_fraction: dict = field(default_factory=lambda: {c: 1.0 for c in TENSOR_CORE_CLASSES})
    # per tensor-core class: scales the fp16 / bf16 (amp) tensor-core peak
    amp_fraction: dict = field(default_factory=lambda: {c: 1.0 for c in TENSOR_CORE_CLASSES})

    def with_values(self, **values) -> "EfficiencyParams":
        """A copy with some fields replaced; ``e_<class>=x`` keys set one class's e_max, ``tc_<class>=x`` its
        tf32 tensor-core fraction and ``amp_<class>=x`` its amp one."""
        base, tc, amp = dict(self.base), dict(self.tensor_core_fraction), dict(self.amp_fraction)
        for prefix, target in (("e_", base), ("tc_", tc), ("amp_", amp)):
            for k in [k for k in values if k.startswith(prefix)]:
                target[k[len(prefix):]] = values.pop(k)
        return replace(self, base=base, tensor_core_fraction=tc, amp_fraction=amp, **values)

    def peak_fraction(self, peak: str) -> dict:
        """Per tensor-core class, the fraction of the tensor-core peak of `peak` ("tf32" or "amp",
        `tag.strategy.memory_decisions.peak_class`) large kernels reach."""
        return self.amp_fraction if peak == "amp" else self.tensor_core_fraction


# Fitted on the FP32 ResNet-50 and BERT-large rows of the published single-GPU table (P100, GTX 1080 Ti,
# RTX 2080 Ti, V100, A100 without TF32, K80), the tf32 fractions on its TF32 rows and the amp fractions on its
# V100 and A100-40GB AMP rows; see the comment block in tag/topology/catalog.py.
GPU_PARAMS = EfficiencyParams(base=dict(_GPU_BASE, conv=0.70, matmul=0.75), half_size_flops=3e8,
                              knee_intensity=0.0, mem_efficiency=0.9, launch_us=20.0, winograd_speedup=2.25,
                              tensor_core_fraction={"conv": 0.4, "matmul": 0.7},
                              amp_fraction={"conv": 1.0, "matmul": 1.0})
CPU_PARAMS = EfficiencyParams(base=dict(_CPU_BASE), launch_us=3.0)


def winograd_eligible(op) -> bool:
    """Whether an op is a convolution cuDNN can run with Winograd: 2-D, 3x3 kernel, stride 1, dilation 1,
    not grouped (`op` is an `OpGraph` Op; its attrs are the ONNX node's)."""
    if op.op_type != "Conv":
        return False
    a = op.attrs or {}
    return (list(a.get("kernel_shape", [])) == [3, 3] and list(a.get("strides", [1, 1])) == [1, 1]
            and list(a.get("dilations", [1, 1])) == [1, 1] and int(a.get("group", 1)) == 1)


def params_for(kind: str) -> EfficiencyParams:
    """The parameter set for a device kind ("gpu" or "cpu")."""
    return CPU_PARAMS if kind == "cpu" else GPU_PARAMS


def efficiency_array(op_classes, kind: str, flops, mem_bytes, params: EfficiencyParams | None = None) -> np.ndarray:
    """Compute efficiency (fraction of peak FLOP/s, in [floor, 1]) of each op: `op_classes` a sequence of
    class names, `flops` and `mem_bytes` arrays of the same length (FLOPs and bytes of memory traffic).

    >>> efficiency_array(["matmul", "conv"], "gpu", [0.0, 0.0], [0.0, 0.0], EfficiencyParams()).tolist()
    [0.7, 0.6]
    """
    p = params or params_for(kind)
    other = p.base.get("other", 0.3)
    eff = np.array([p.base.get(c, other) for c in op_classes], dtype=float)
    f = np.asarray(flops, dtype=float)
    m = np.asarray(mem_bytes, dtype=float)
    if p.half_size_flops > 0:
        eff = eff * np.where(f > 0, f / np.maximum(f + p.half_size_flops, 1e-300), 0.0)
    if p.half_intensity > 0 or p.knee_intensity > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            ai = np.where(m > 0, f / np.where(m > 0, m, 1.0), np.inf)
        if p.half_intensity > 0:
            eff = eff * np.where(np.isinf(ai), 1.0, ai / (np.where(np.isinf(ai), 0.0, ai) + p.half_intensity))
        if p.knee_intensity > 0:
            eff = eff * np.minimum(1.0, ai / p.knee_intensity)
    return np.clip(eff, p.floor, 1.0)


def efficiency(op_class: str, kind: str, flops: float = 0.0, mem_bytes: float = 0.0,
               params: EfficiencyParams | None = None) -> float:
    """Fraction of peak FLOP/s an op of `op_class` with `flops` FLOPs and `mem_bytes` bytes of memory traffic
    reaches on a device of `kind` (`efficiency_array` for one op).

    >>> efficiency("matmul", "gpu", params=EfficiencyParams())
    0.7
    """
    return float(efficiency_array([op_class], kind, [flops], [mem_bytes], params)[0])


def bandwidth_fraction(mem_bytes, kind: str, params: EfficiencyParams | None = None) -> np.ndarray:
    """Fraction of datasheet memory bandwidth a kernel moving `mem_bytes` bytes reaches (array in, array out):
    mem_efficiency x M / (M + half_size_bytes).

    >>> bandwidth_fraction([1e9], "gpu", EfficiencyParams(mem_efficiency=0.8)).tolist()
    [0.8]
    """
    p = params or params_for(kind)
    m = np.asarray(mem_bytes, dtype=float)
    frac = np.full(m.shape, p.mem_efficiency, dtype=float)
    if p.half_size_bytes > 0:
        frac = frac * np.where(m > 0, m / np.maximum(m + p.half_size_bytes, 1e-300), 1.0)
    return np.maximum(frac, 1e-6)

"""Roofline efficiency: the fraction of a device's peak FLOP/s an op class reaches.

One small function with named parameters, so calibration can fit them in one place. The model:

    eff(op_class, kind, flops, intensity) = base[op_class] x size_factor x intensity_factor

* ``base`` is the fraction of peak a large, compute-bound kernel of that class reaches
  (cuDNN/cuBLAS convolutions and GEMMs reach 60-80 % of FP32 peak on V100/A100; elementwise and
  normalisation kernels are memory-bound, so their compute efficiency matters little).
* ``size_factor = flops / (flops + half_size_flops)``: small kernels do not fill the device
  (half of ``base`` at ``half_size_flops`` FLOPs; 0 disables it).
* ``intensity_factor = intensity / (intensity + half_intensity)`` with intensity in FLOP per byte of
  memory traffic (0 disables it). Defaults leave both factors off for CPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Fraction of peak reached by large kernels, per op class (OpGraph.Op.op_class).
_GPU_BASE = {
    "conv": 0.60, "matmul": 0.70, "norm": 0.25, "elementwise": 0.25, "reduce": 0.25, "pool": 0.30,
    "softmax": 0.25, "gather": 0.20, "data_movement": 0.20, "shape": 0.20, "other": 0.30,
}
# One CPU core with vectorised kernels (oneDNN / MKL GEMM reach about 70 % of a core's FMA peak).
_CPU_BASE = {
    "conv": 0.50, "matmul": 0.60, "norm": 0.20, "elementwise": 0.20, "reduce": 0.20, "pool": 0.25,
    "softmax": 0.20, "gather": 0.15, "data_movement": 0.15, "shape": 0.15, "other": 0.25,
}


@dataclass(frozen=True)
class EfficiencyParams:
    """Named parameters of the efficiency model (one set per device kind)."""

    base: dict = field(default_factory=lambda: dict(_GPU_BASE))
    half_size_flops: float = 0.0  # FLOPs at which a kernel reaches half its class efficiency; 0 = off
    half_intensity: float = 0.0  # FLOP/byte at which a kernel reaches half its class efficiency; 0 = off
    floor: float = 0.01  # never below this fraction of peak


GPU_PARAMS = EfficiencyParams(base=dict(_GPU_BASE))
CPU_PARAMS = EfficiencyParams(base=dict(_CPU_BASE))


def params_for(kind: str) -> EfficiencyParams:
    """The parameter set for a device kind ("gpu" or "cpu")."""
    return CPU_PARAMS if kind == "cpu" else GPU_PARAMS


def efficiency(op_class: str, kind: str, flops: float = 0.0, mem_bytes: float = 0.0,
               params: EfficiencyParams | None = None) -> float:
    """Fraction of peak FLOP/s (0, 1] an op of `op_class` with `flops` FLOPs and `mem_bytes` bytes of
    memory traffic reaches on a device of `kind`.

    >>> efficiency("matmul", "gpu")
    0.7
    """
    p = params or params_for(kind)
    eff = p.base.get(op_class, p.base.get("other", 0.3))
    if p.half_size_flops > 0:
        eff *= flops / (flops + p.half_size_flops) if flops > 0 else 0.0
    if p.half_intensity > 0:
        intensity = flops / mem_bytes if mem_bytes > 0 else float("inf")
        eff *= 1.0 if intensity == float("inf") else intensity / (intensity + p.half_intensity)
    return max(eff, p.floor)

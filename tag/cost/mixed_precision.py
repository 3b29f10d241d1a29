"""Memory-traffic terms of fp16 / bf16 mixed precision in the cost model, one place for each.

Mixed precision here is torch.autocast with fp32 master weights (docs/plan.md § memory and precision); tf32 and
fp32 change none of these terms (tf32 keeps fp32 storage and only moves conv and matmul to the TF32 peak).
Per element, under fp16 / bf16:

* activations are computed, read and written in 16 bits, and tensor-core ops read the 16-bit copy of their
  weights: every op's traffic (`tag.graph.costs` mem_bytes, fp32 there) scales by
  ``compute_bytes(precision) / 4`` = 1/2 (`traffic_scale`);
* each weight of a conv or matmul op is cast once per forward (autocast caches the cast for the iteration): one
  kernel per weight tensor that reads the fp32 master (4 bytes) and writes the 16-bit copy (2 bytes); the backward
  gives that weight's gradient in 16 bits and casts it to the fp32 gradient: one kernel reading 2 and writing 4.
  6 bytes per weight element in each phase (`cast_bytes_per_param`). This is the write of the 16-bit weight copy;
  the update itself stays fp32 and writes none;
* convolution layout: cuDNN's 16-bit tensor-core convolutions take channels-last (NHWC) tensors. A model run in
  NCHW (PyTorch's default memory format) has each convolution's input and output transposed to NHWC and back, in
  separate kernels: one read and one write of each, i.e. twice the convolution's own 16-bit activation traffic
  and two kernels per forward (`layout_transpose_factor`; the backward, which moves twice the forward's traffic,
  twice that). "nhwc" (``torch.channels_last``, TensorFlow's and XLA's layout passes, MXNet's NHWC layouts) runs
  none;
* fp16 only, dynamic loss scaling (``torch.amp.GradScaler.unscale_``): every fp32 gradient is read, checked for
  inf / NaN and written back unscaled once per step before the update: 8 bytes per element
  (`loss_scaling_bytes_per_param`). bf16 has fp32's exponent range and needs no scaling.
"""

from __future__ import annotations

from tag.cost.optimizer import FP32_BYTES
from tag.strategy.memory_decisions import compute_bytes, peak_class

HALF_BYTES = 2
LAYOUTS = ("nhwc", "nchw")  # memory format of convolution activations


def is_mixed(precision: str) -> bool:
    """Whether `precision` is fp16 / bf16 mixed precision (16-bit compute, fp32 master weights).

    >>> is_mixed("bf16"), is_mixed("tf32")
    (True, False)
    """
    return peak_class(precision) == "amp"


def traffic_scale(precision: str) -> float:
    """Factor on an op's fp32 memory traffic under `precision`: bytes per computed element over 4.

    >>> traffic_scale("fp16"), traffic_scale("tf32")
    (0.5, 1.0)
    """
    return compute_bytes(precision) / FP32_BYTES


def cast_bytes_per_param(precision: str) -> int:
    """Bytes one weight element of a conv / matmul op moves in cast kernels per phase (forward: fp32 master ->
    16-bit copy; backward: 16-bit gradient -> fp32 gradient): 4 + 2 under mixed precision, else 0.

    >>> cast_bytes_per_param("bf16"), cast_bytes_per_param("fp32")
    (6, 0)
    """
    return FP32_BYTES + HALF_BYTES if is_mixed(precision) else 0


def loss_scaling_bytes_per_param(precision: str) -> int:
    """Bytes per parameter element of fp16's loss-scale unscale step (read and write each fp32 gradient), else 0.

    >>> loss_scaling_bytes_per_param("fp16"), loss_scaling_bytes_per_param("bf16")
    (8, 0)
    """
    return 2 * FP32_BYTES if precision == "fp16" else 0


def layout_transpose_factor(precision: str, layout: str) -> float:
    """Extra traffic of a convolution's layout transposes, as a multiple of its own activation traffic (its
    inputs read and outputs written, 16-bit), and kernels per forward: 2 for "nchw" under mixed precision
    (input and output each read and written once more), else 0.

    >>> layout_transpose_factor("fp16", "nchw"), layout_transpose_factor("fp16", "nhwc"), layout_transpose_factor("fp32", "nchw")
    (2.0, 0.0, 0.0)
    """
    return 2.0 if layout == "nchw" and is_mixed(precision) else 0.0

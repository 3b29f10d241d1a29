"""Reference-side helpers for the converter tests: onnx.reference.ReferenceEvaluator with five overrides.

* MaxPool, AveragePool: the evaluator's pure-Python pooling takes minutes on the light zoo; these are
  vectorised numpy versions of the ONNX definitions (explicit pads, strides, dilations, ceil_mode,
  count_include_pad).
* LRN: the evaluator loops over the batch axis instead of the channels (square sums are wrong for every
  channel but the first); this is the spec's sum over channels [c - floor((size-1)/2), c + ceil((size-1)/2)].
* Softmax before opset 13: the evaluator normalises over ``axis`` only, while the spec (Softmax-1/11)
  coerces the input to 2-D ``[prod(shape[:axis]), prod(shape[axis:])]`` and normalises each row.
* BatchNormalization before opset 14: the evaluator runs training mode when ``momentum`` has its default,
  while the spec's single-output case is test mode: (x - mean) / sqrt(var + eps) * scale + bias.
All three are numpy, written from the ONNX operator spec, independent of the torch converter.
"""

from __future__ import annotations

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun


def _attr(op: OpRun, name: str, default):
    for a in op.onnx_node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _pool_windows(op: OpRun, x: np.ndarray, fill: float) -> tuple[np.ndarray, int]:
    """Windows [N, C, *out, *kernel] of x padded with ``fill`` per the ONNX pooling definition."""
    kernel = list(_attr(op, "kernel_shape", None))
    n = len(kernel)
    assert _attr(op, "auto_pad", b"NOTSET") in (b"NOTSET", b"VALID"), "test helper: explicit pads only"
    strides = list(_attr(op, "strides", [1] * n))
    dil = list(_attr(op, "dilations", [1] * n))
    pads = list(_attr(op, "pads", [0] * (2 * n)))
    ceil = _attr(op, "ceil_mode", 0)
    outs, pad_width = [], [(0, 0), (0, 0)]
    for i in range(n):
        span = (kernel[i] - 1) * dil[i] + 1
        total = x.shape[2 + i] + pads[i] + pads[i + n] - span
        o = (-(-total // strides[i]) if ceil else total // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
            o -= 1  # a window may not start in the end padding
        outs.append(o)
        need = (o - 1) * strides[i] + span
        pad_width.append((pads[i], max(need - x.shape[2 + i] - pads[i], 0)))
    xp = np.pad(x, pad_width, constant_values=fill)
    spans = tuple((kernel[i] - 1) * dil[i] + 1 for i in range(n))
    w = sliding_window_view(xp, spans, axis=tuple(range(2, 2 + n)))
    w = w[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
          + tuple(slice(None, None, d) for d in dil)]
    return w[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)], n


class MaxPool(OpRun):
    op_domain = ""

    def _run(self, x, *args, **kwargs):
        w, n = _pool_windows(self, x, -np.inf)
        return (w.max(axis=tuple(range(-n, 0))).astype(x.dtype),)


class AveragePool(OpRun):
    op_domain = ""

    def _run(self, x, *args, **kwargs):
        w, n = _pool_windows(self, x, 0.0)
        total = w.sum(axis=tuple(range(-n, 0)), dtype=np.float64)
        if _attr(self, "count_include_pad", 0):
            count = float(np.prod(_attr(self, "kernel_shape", None)))
        else:
            ones, _ = _pool_windows(self, np.ones((1, 1) + x.shape[2:]), 0.0)
            count = ones.sum(axis=tuple(range(-n, 0)))
        return ((total / count).astype(x.dtype),)


class LRN(OpRun):
    op_domain = ""

    def _run(self, x, *args, **kwargs):
        size = _attr(self, "size", None)
        alpha, beta, bias = _attr(self, "alpha", 1e-4), _attr(self, "beta", 0.75), _attr(self, "bias", 1.0)
        lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
        sq = np.zeros_like(x)
        for c in range(x.shape[1]):
            sq[:, c] = np.sum(x[:, max(0, c - lo):min(x.shape[1], c + hi + 1)] ** 2, axis=1)
        return ((x / (bias + alpha / size * sq) ** beta).astype(x.dtype),)


class Softmax(OpRun):
    op_domain = ""

    def _run(self, x, *args, **kwargs):
        axis = _attr(self, "axis", 1) % x.ndim
        flat = x.reshape(int(np.prod(x.shape[:axis])), -1)
        e = np.exp(flat - flat.max(axis=1, keepdims=True))
        return ((e / e.sum(axis=1, keepdims=True)).reshape(x.shape).astype(x.dtype),)


class BatchNormalization(OpRun):
    op_domain = ""

    def _run(self, x, scale, bias, mean, var, *args, **kwargs):
        eps = _attr(self, "epsilon", 1e-5)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + bias.reshape(shape)
        return (y.astype(x.dtype),)


def reference(model: onnx.ModelProto) -> ReferenceEvaluator:
    """A ReferenceEvaluator for ``model`` with the fixes above (Softmax / BatchNormalization only below
    the opsets where the evaluator diverges from the spec)."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    ops = [MaxPool, AveragePool, LRN]
    if opset < 13:
        ops.append(Softmax)
    if opset < 14:
        ops.append(BatchNormalization)
    return ReferenceEvaluator(model, new_ops=ops)


def all_intermediates(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose graph outputs are every node output (so the evaluator returns them all)."""
    names = [o for n in model.graph.node for o in n.output if o]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.output[:]
    for name in names:
        out.graph.output.append(onnx.ValueInfoProto(name=name))
    return out, names


def randomize_generators(model: onnx.ModelProto, seed: int, max_elements: int = 1 << 20) -> onnx.ModelProto:
    """The light zoo's weights are ConstantOfShape(0.02) generators: replace each generated float weight by
    an initializer of seeded values 0.02 * (1 + U(-0.5, 0.5)) (positive, so BN variances stay valid), which
    breaks the symmetry that makes constant weights blind to layout mistakes. Generators of more than
    ``max_elements`` (the big FC layers of VGG / AlexNet) stay generators, so the copy stays small."""
    rng = np.random.default_rng(seed)
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = []
    for n in out.graph.node:
        shape = [int(d) for d in consts[n.input[0]]] if n.op_type == "ConstantOfShape" and n.input[0] in consts else None
        if shape is not None and int(np.prod(shape)) <= max_elements:
            value = (0.02 * (1 + rng.uniform(-0.5, 0.5, size=shape))).astype(np.float32)
            out.graph.initializer.append(onnx.numpy_helper.from_array(value, n.output[0]))
        else:
            keep.append(n)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out

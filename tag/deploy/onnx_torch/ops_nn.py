"""Converters for convolutions, pooling, normalisations, LRN, Dropout and resizing (Resize, Upsample).

Training-mode ops (BatchNormalization ``training_mode=1``, Dropout with ``training_mode`` true) read the
`TrainingContext` of the rows being run (`training_context`): where those rows sit in the global batch, the
step and seed of the dropout masks, and how to sum batch statistics over the ranks that share the op's rows.
Without a context the rows being run are the whole batch (one device), seed 0, step 0.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from tag.deploy.onnx_torch.registry import converter, ints, norm_axis


@dataclass(frozen=True)
class TrainingContext:
    """seed, step: of the dropout masks; row_offset: the first global row of the rows being run; global_rows:
    rows of the global batch (None: the rows being run); stats_sum: sums a tensor over the ranks that run this
    op's other rows, autograd-aware (None: this process holds every row); batch_axis(tensor name) -> axis;
    feature_slice(tensor name) -> (axis, first index, whole length) when the tensor is a tensor-sharded position's
    slice of its features (None: whole)."""

    seed: int = 0
    step: int = 0
    row_offset: int = 0
    global_rows: int | None = None
    stats_sum: Callable | None = None
    batch_axis: Callable | None = None
    feature_slice: Callable | None = None


_CONTEXT: contextvars.ContextVar = contextvars.ContextVar("tag_training_context", default=TrainingContext())


@contextlib.contextmanager
def training_context(ctx: TrainingContext):
    """Run training-mode ops under `ctx` (the runtime sets it per group and step)."""
    token = _CONTEXT.set(ctx)
    try:
        yield ctx
    finally:
        _CONTEXT.reset(token)


def dropout_seed(seed: int, step: int, node_index: int) -> int:
    """The generator seed of node `node_index`'s mask at `step`: one number per (seed, step, node), any plan."""
    return ((int(seed) * 1_000_003 + int(step)) * 1_000_003 + int(node_index)) % (2 ** 63)


class Unsupported(Exception):
    """A node uses an attribute value the converter does not implement (the message says which)."""


def _spatial_pads(node, in_sizes, kernel, strides, dilations) -> list[tuple[int, int]]:
    """(begin, end) padding per spatial dim from ``pads`` or ``auto_pad`` (ONNX Conv/Pool semantics)."""
    auto = node.attrs.get("auto_pad", "NOTSET")
    n = len(kernel)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(n):
            o = -(-in_sizes[i] // strides[i])
            total = max((o - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sizes[i], 0)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return out
    if auto == "VALID":
        return [(0, 0)] * n
    pads = list(node.attrs.get("pads", [0] * (2 * n)))
    return [(pads[i], pads[i + n]) for i in range(n)]


def _torch_pad_arg(pads: list[tuple[int, int]]) -> list[int]:
    """Per-dim (begin, end) pads as F.pad's argument (last dim first)."""
    flat = []
    for b, e in reversed(pads):
        flat += [b, e]
    return flat


def _window(node, x, kernel):
    n = len(kernel)
    strides = list(node.attrs.get("strides", [1] * n))
    dilations = list(node.attrs.get("dilations", [1] * n))
    pads = _spatial_pads(node, list(x.shape[2:]), kernel, strides, dilations)
    return strides, dilations, pads


@converter("Conv")
def _conv(node, ins):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    kernel = list(node.attrs.get("kernel_shape", w.shape[2:]))
    strides, dilations, pads = _window(node, x, kernel)
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(kernel)]
    padding = [p[0] for p in pads]
    if any(bg != e for bg, e in pads):
        x = F.pad(x, _torch_pad_arg(pads))
        padding = [0] * len(kernel)
    return fn(x, w, b, strides, padding, dilations, node.attrs.get("group", 1))


@converter("ConvTranspose")
def _conv_transpose(node, ins):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    n = w.dim() - 2
    strides = list(node.attrs.get("strides", [1] * n))
    dilations = list(node.attrs.get("dilations", [1] * n))
    if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or "output_shape" in node.attrs:
        raise Unsupported("ConvTranspose with auto_pad SAME or output_shape")
    pads = list(node.attrs.get("pads", [0] * (2 * n)))
    out_pad = list(node.attrs.get("output_padding", [0] * n))
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    y = fn(x, w, b, strides, 0, out_pad, node.attrs.get("group", 1), dilations)
    # crop begin/end pads (exact for asymmetric pads too)
    for i in range(n):
        bgn, end = pads[i], pads[i + n]
        if bgn or end:
            y = y.narrow(2 + i, bgn, y.shape[2 + i] - bgn - end)
    return y


@converter("MaxPool")
def _maxpool(node, ins):
    if len(node.outputs) > 1 and node.outputs[1]:
        raise Unsupported("MaxPool with the Indices output")
    x = ins[0]
    kernel = list(node.attrs["kernel_shape"])
    strides, dilations, pads = _window(node, x, kernel)
    ceil = bool(node.attrs.get("ceil_mode", 0))
    fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[len(kernel)]
    if all(b == e and b <= k // 2 for (b, e), k in zip(pads, kernel)):
        return fn(x, kernel, strides, [p[0] for p in pads], dilations, ceil_mode=ceil)
    x = F.pad(x, _torch_pad_arg(pads), value=float("-inf"))
    return fn(x, kernel, strides, 0, dilations, ceil_mode=ceil)


@converter("AveragePool")
def _avgpool(node, ins):
    x = ins[0]
    kernel = list(node.attrs["kernel_shape"])
    strides, dilations, pads = _window(node, x, kernel)
    if any(d != 1 for d in dilations):
        raise Unsupported("AveragePool with dilations")
    ceil = bool(node.attrs.get("ceil_mode", 0))
    include = bool(node.attrs.get("count_include_pad", 0))
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[len(kernel)]
    if all(b == e and b <= k // 2 for (b, e), k in zip(pads, kernel)):
        return fn(x, kernel, strides, [p[0] for p in pads], ceil_mode=ceil, count_include_pad=include)
    area = math.prod(kernel)
    summed = fn(F.pad(x, _torch_pad_arg(pads)), kernel, strides, 0, ceil_mode=ceil) * area
    if include:
        return summed / area
    ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
    count = fn(F.pad(ones, _torch_pad_arg(pads)), kernel, strides, 0, ceil_mode=ceil) * area
    return summed / count


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node, ins):
    x = ins[0]
    dims = list(range(2, x.dim()))
    if node.op_type == "GlobalAveragePool":
        return torch.mean(x, dim=dims, keepdim=True)
    return torch.amax(x, dim=dims, keepdim=True)


def _channel_shape(x, stat):
    """Shape broadcasting a per-channel vector (or a per-channel-and-spatial stat) over x = [N, C, ...]."""
    if stat.dim() == 1:
        return stat.reshape((1, -1) + (1,) * (x.dim() - 2))
    return stat.unsqueeze(0)


@converter("BatchNormalization")
def _batchnorm(node, ins):
    """Inference mode: y = (x - mean) / sqrt(var + eps) * scale + bias, per channel (axis 1).

    training_mode=1 (ONNX, opset >= 14): mean and var are the batch's, over every axis but 1 and over the global
    batch (the context's stats_sum adds the other ranks' sums: SyncBatchNorm semantics, two passes: mean, then the
    sum of squared deviations), var the population variance; the running statistics (inputs 3, 4) are updated in
    place as running = running x momentum + batch x (1 - momentum) and returned as outputs 1 and 2.
    """
    if node.attrs.get("training_mode", 0):
        return _batchnorm_training(node, ins)
    x, scale, bias, mean, var = ins[:5]
    eps = node.attrs.get("epsilon", 1e-5)
    inv = torch.rsqrt(_channel_shape(x, var) + eps)
    return (x - _channel_shape(x, mean)) * inv * _channel_shape(x, scale) + _channel_shape(x, bias)


def _batchnorm_training(node, ins):
    x, scale, bias, running_mean, running_var = ins[:5]
    ctx = _CONTEXT.get()
    dims = [0] + list(range(2, x.dim()))
    c = x.shape[1]
    total = lambda t: ctx.stats_sum(t) if ctx.stats_sum is not None else t  # noqa: E731
    first = total(torch.cat([x.sum(dim=dims), x.new_tensor([x.numel() // c])]))
    count = first[c]
    mean = first[:c] / count
    centred = x - _channel_shape(x, mean)
    var = total((centred * centred).sum(dim=dims)) / count
    y = centred * torch.rsqrt(_channel_shape(x, var) + node.attrs.get("epsilon", 1e-5))
    y = y * _channel_shape(x, scale) + _channel_shape(x, bias)
    m = node.attrs.get("momentum", 0.9)
    with torch.no_grad():
        running_mean.mul_(m).add_(mean.detach() * (1 - m))
        running_var.mul_(m).add_(var.detach() * (1 - m))
    return y, running_mean.detach(), running_var.detach()


@converter("InstanceNormalization")
def _instancenorm(node, ins):
    x, scale, bias = ins
    dims = list(range(2, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + node.attrs.get("epsilon", 1e-5))
    return y * _channel_shape(x, scale) + _channel_shape(x, bias)


@converter("LayerNormalization")
def _layernorm(node, ins):
    """y = (x - mean) / sqrt(var + eps) * scale + bias over axes [axis, rank); also Mean and InvStdDev."""
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = norm_axis(node.attrs.get("axis", -1), x.dim())
    dims = list(range(axis, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    inv = torch.rsqrt(var + node.attrs.get("epsilon", 1e-5))
    y = (x - mean) * inv * scale
    if bias is not None:
        y = y + bias
    return y, mean, inv


@converter("GroupNormalization")
def _groupnorm(node, ins):
    x, scale, bias = ins
    g = node.attrs["num_groups"]
    n, c = x.shape[0], x.shape[1]
    xg = x.reshape(n, g, -1)
    mean = xg.mean(dim=2, keepdim=True)
    var = ((xg - mean) ** 2).mean(dim=2, keepdim=True)
    y = ((xg - mean) * torch.rsqrt(var + node.attrs.get("epsilon", 1e-5))).reshape(x.shape)
    if scale.numel() == g and g != c:  # opset 18: one scale per group
        scale, bias = scale.repeat_interleave(c // g), bias.repeat_interleave(c // g)
    return y * _channel_shape(x, scale) + _channel_shape(x, bias)


@converter("LRN")
def _lrn(node, ins):
    """y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta."""
    x = ins[0]
    size = node.attrs["size"]
    alpha, beta, k = node.attrs.get("alpha", 1e-4), node.attrs.get("beta", 0.75), node.attrs.get("bias", 1.0)
    sq = x * x
    front, back = (size - 1) // 2, size - 1 - (size - 1) // 2
    pad = [0, 0] * (x.dim() - 2) + [front, back]
    padded = F.pad(sq, pad)
    c = x.shape[1]
    total = sum(padded.narrow(1, j, c) for j in range(size))
    return x / torch.pow(k + alpha / size * total, beta)


@converter("Dropout")
def _dropout(node, ins):
    """Inference (no training_mode input, or false): identity (and an all-true mask when requested).

    training_mode true (opset >= 12): y = x * mask / (1 - ratio), mask = u >= ratio with u uniform in [0, 1) drawn
    for the whole global batch by a generator seeded `dropout_seed(seed, step, node index)` and cut to the rows
    being run (and, on a tensor-sharded position, to its features), so every plan sees the masks of one device.
    """
    x = ins[0]
    training = ins[2] if len(ins) > 2 and ins[2] is not None else None
    if training is None or not bool(training.reshape(-1)[0]):
        if len(node.outputs) > 1 and node.outputs[1]:
            return x, torch.ones_like(x, dtype=torch.bool)
        return x
    ratio = float(ins[1].reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else 0.5
    ctx = _CONTEXT.get()
    axis = ctx.batch_axis(node.inputs[0]) if ctx.batch_axis is not None else 0
    gen = torch.Generator().manual_seed(dropout_seed(ctx.seed, ctx.step, node.index))
    shape = list(x.shape)
    part = ctx.feature_slice(node.inputs[0]) if ctx.feature_slice is not None else None
    if part is not None:
        shape[part[0] % x.dim()] = part[2]
    if axis is not None:
        shape[axis] = ctx.global_rows if ctx.global_rows is not None else x.shape[axis]
    u = torch.rand(shape, generator=gen)  # not batched: one mask for the whole tensor
    if axis is not None:
        u = u.narrow(axis, ctx.row_offset, x.shape[axis])
    if part is not None:
        u = u.narrow(part[0] % x.dim(), part[1], x.shape[part[0] % x.dim()])
    keep = (u >= ratio).to(x.device)
    y = x * keep.to(x.dtype) / (1.0 - ratio) if ratio < 1.0 else torch.zeros_like(x)
    if len(node.outputs) > 1 and node.outputs[1]:
        return y, keep
    return y


def _source_coords(node, mode, out_len, in_len, scale, dtype):
    """ONNX coordinate_transformation_mode: input coordinate of each output index along one axis."""
    x = torch.arange(out_len, dtype=torch.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else torch.zeros_like(x)
    if mode == "align_corners":
        return x * (in_len - 1) / (out_len - 1) if out_len > 1 else torch.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    raise Unsupported(f"Resize coordinate_transformation_mode={mode!r}")


def _nearest_index(coords, mode):
    if mode == "round_prefer_floor":
        return torch.ceil(coords - 0.5)
    if mode == "round_prefer_ceil":
        return torch.floor(coords + 0.5)
    if mode == "floor":
        return torch.floor(coords)
    if mode == "ceil":
        return torch.ceil(coords)
    raise Unsupported(f"Resize nearest_mode={mode!r}")


def resize(node, x, scales, sizes, coord_mode, mode, nearest_mode):
    """Separable nearest / (multi)linear resize of x with per-axis scales or output sizes (ONNX Resize)."""
    if mode not in ("nearest", "linear"):
        raise Unsupported(f"Resize mode={mode!r}")
    axes = list(range(x.dim()))
    if "axes" in node.attrs:
        axes = [norm_axis(a, x.dim()) for a in node.attrs["axes"]]
    for i, a in enumerate(axes):
        in_len = x.shape[a]
        if sizes:
            out_len = sizes[i]
            scale = out_len / in_len
        else:
            scale = scales[i]
            out_len = int(math.floor(in_len * scale))
        if out_len == in_len and scale == 1.0:
            continue
        coords = _source_coords(node, coord_mode, out_len, in_len, scale, x.dtype)
        if mode == "nearest":
            idx = _nearest_index(coords, nearest_mode).clamp(0, in_len - 1).to(torch.int64).to(x.device)
            x = x.index_select(a, idx)
        else:
            coords = coords.clamp(0, in_len - 1)
            i0 = torch.floor(coords).to(torch.int64)
            i1 = torch.clamp(i0 + 1, max=in_len - 1)
            w = (coords - i0).to(x.dtype).to(x.device)
            shape = [1] * x.dim()
            shape[a] = out_len
            w = w.reshape(shape)
            x = x.index_select(a, i0.to(x.device)) * (1 - w) + x.index_select(a, i1.to(x.device)) * w
    return x


@converter("Resize")
def _resize(node, ins):
    x = ins[0]
    if node.opset < 11:
        scales, sizes = [float(s) for s in ins[1].reshape(-1).tolist()], []
        coord = "asymmetric"
    else:
        s = ins[2] if len(ins) > 2 else None
        scales = [float(v) for v in s.reshape(-1).tolist()] if s is not None and s.numel() else []
        sizes = ints(ins[3]) if len(ins) > 3 and ins[3] is not None else []
        coord = node.attrs.get("coordinate_transformation_mode", "half_pixel")
    mode = node.attrs.get("mode", "nearest")
    nearest = node.attrs.get("nearest_mode", "round_prefer_floor") if node.opset >= 11 else "floor"
    if node.attrs.get("antialias", 0) or node.attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise Unsupported("Resize with antialias or keep_aspect_ratio_policy")
    return resize(node, x, scales, sizes, coord, mode, nearest)


@converter("Upsample")
def _upsample(node, ins):
    x = ins[0]
    scales = node.attrs["scales"] if node.opset < 9 else [float(s) for s in ins[1].reshape(-1).tolist()]
    return resize(node, x, scales, [], "asymmetric", node.attrs.get("mode", "nearest"), "floor")

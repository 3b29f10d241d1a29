"""Converters for shape-family ops, data movement, indexing (Gather/Scatter), casts and constants.

Shape-family ops compute on the tensors at hand, so targets derived from ``Shape`` follow the actual row count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tag.deploy.onnx_torch.ops_nn import Unsupported
from tag.deploy.onnx_torch.registry import ONNX_TO_TORCH, converter, ints, norm_axis


@converter("Constant")
def _constant(node, ins):
    a = node.attrs
    if "value" in a:
        return a["value"]
    if "value_float" in a:
        return torch.tensor(a["value_float"], dtype=torch.float32)
    if "value_floats" in a:
        return torch.tensor(a["value_floats"], dtype=torch.float32)
    if "value_int" in a:
        return torch.tensor(a["value_int"], dtype=torch.int64)
    if "value_ints" in a:
        return torch.tensor(a["value_ints"], dtype=torch.int64)
    raise Unsupported("Constant without a tensor, float(s) or int(s) value")


@converter("Shape")
def _shape(node, ins):
    shape = list(ins[0].shape)
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end", len(shape))
    return torch.tensor(shape[start:end], dtype=torch.int64)


@converter("Size")
def _size(node, ins):
    return torch.tensor(ins[0].numel(), dtype=torch.int64)


@converter("ConstantOfShape")
def _constant_of_shape(node, ins):
    value = node.attrs.get("value")
    shape = ints(ins[0])
    if value is None:
        return torch.zeros(shape, dtype=torch.float32)
    return torch.full(shape, value.reshape(-1)[0].item(), dtype=value.dtype)


@converter("Range")
def _range(node, ins):
    start, limit, delta = ins
    return torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)


@converter("Reshape")
def _reshape(node, ins):
    x = ins[0]
    shape = ints(ins[1]) if node.opset >= 5 else list(node.attrs["shape"])
    if not node.attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


@converter("Flatten")
def _flatten(node, ins):
    x = ins[0]
    axis = norm_axis(node.attrs.get("axis", 1), x.dim())
    lead = 1
    for d in x.shape[:axis]:
        lead *= d
    return x.reshape(lead, -1)


@converter("Transpose")
def _transpose(node, ins):
    x = ins[0]
    perm = node.attrs.get("perm", list(reversed(range(x.dim()))))
    return x.permute(*perm)


def _axes(node, ins, idx=1):
    """Axes from the attribute (older opsets) or from input ``idx`` (opset 13+)."""
    if "axes" in node.attrs:
        return list(node.attrs["axes"])
    if len(ins) > idx and ins[idx] is not None:
        return ints(ins[idx])
    return None


@converter("Squeeze")
def _squeeze(node, ins):
    x = ins[0]
    axes = _axes(node, ins)
    if axes is None:
        return torch.squeeze(x)
    axes = sorted(norm_axis(a, x.dim()) for a in axes)
    for a in reversed(axes):
        x = x.squeeze(a)
    return x


@converter("Unsqueeze")
def _unsqueeze(node, ins):
    x = ins[0]
    axes = _axes(node, ins)
    rank = x.dim() + len(axes)
    for a in sorted(norm_axis(a, rank) for a in axes):
        x = x.unsqueeze(a)
    return x


@converter("Concat")
def _concat(node, ins):
    parts = [t for t in ins if t is not None]
    dtype = parts[0].dtype
    return torch.cat([t.to(dtype) for t in parts], dim=node.attrs["axis"])


@converter("Split")
def _split(node, ins):
    x = ins[0]
    axis = norm_axis(node.attrs.get("axis", 0), x.dim())
    n_out = len(node.outputs)
    if "split" in node.attrs:
        sizes = list(node.attrs["split"])
    elif len(ins) > 1 and ins[1] is not None:
        sizes = ints(ins[1])
    else:
        n = node.attrs.get("num_outputs", n_out)
        chunk = -(-x.shape[axis] // n)
        sizes = [min(chunk, x.shape[axis] - i * chunk) for i in range(n)]
    return tuple(torch.split(x, sizes, dim=axis))


def _slice_axis(x, axis, start, end, step):
    dim = x.shape[axis]
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = max(0, min(start, dim)), max(0, min(end, dim))
        if start >= end:
            return x.narrow(axis, 0, 0)
        if step == 1:
            return x.narrow(axis, start, end - start)
        idx = torch.arange(start, end, step, device=x.device)
    else:
        start, end = max(-1, min(start, dim - 1)), max(-1, min(end, dim - 1))
        idx = torch.arange(start, end, step, device=x.device)
    return x.index_select(axis, idx)


@converter("Slice")
def _slice(node, ins):
    x = ins[0]
    if node.opset < 10:
        starts, ends = list(node.attrs["starts"]), list(node.attrs["ends"])
        axes = list(node.attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = ints(ins[1]), ints(ins[2])
        axes = ints(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        x = _slice_axis(x, norm_axis(a, x.dim()), s, e, st)
    return x


def _positive(idx, dim):
    return torch.where(idx < 0, idx + dim, idx)


@converter("Gather")
def _gather(node, ins):
    x, idx = ins
    axis = norm_axis(node.attrs.get("axis", 0), x.dim())
    idx = _positive(idx.to(torch.int64), x.shape[axis])
    out = x.index_select(axis, idx.reshape(-1))
    return out.reshape(tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:]))


@converter("GatherElements")
def _gather_elements(node, ins):
    x, idx = ins
    axis = norm_axis(node.attrs.get("axis", 0), x.dim())
    return torch.gather(x, axis, _positive(idx.to(torch.int64), x.shape[axis]))


@converter("GatherND")
def _gather_nd(node, ins):
    x, idx = ins
    b = node.attrs.get("batch_dims", 0)
    if b:
        raise Unsupported("GatherND with batch_dims > 0")
    k = idx.shape[-1]
    idx = _positive(idx.to(torch.int64), torch.tensor(x.shape[:k], device=idx.device))
    flat = idx.reshape(-1, k)
    out = x[tuple(flat[:, j] for j in range(k))]
    return out.reshape(tuple(idx.shape[:-1]) + tuple(x.shape[k:]))


@converter("ScatterND")
def _scatter_nd(node, ins):
    x, idx, upd = ins
    if node.attrs.get("reduction", "none") != "none":
        raise Unsupported("ScatterND with a reduction")
    k = idx.shape[-1]
    flat = idx.to(torch.int64).reshape(-1, k)
    out = x.clone()
    out[tuple(flat[:, j] for j in range(k))] = upd.reshape((flat.shape[0],) + tuple(x.shape[k:]))
    return out


@converter("ScatterElements")
def _scatter_elements(node, ins):
    x, idx, upd = ins
    axis = norm_axis(node.attrs.get("axis", 0), x.dim())
    idx = _positive(idx.to(torch.int64), x.shape[axis])
    red = node.attrs.get("reduction", "none")
    if red == "none":
        return torch.scatter(x, axis, idx, upd)
    return torch.scatter_reduce(x, axis, idx, upd, {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[red])


@converter("Expand")
def _expand(node, ins):
    x, shape = ins[0], ints(ins[1])
    return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(shape)))


@converter("Tile")
def _tile(node, ins):
    return ins[0].repeat(*ints(ins[1]))


@converter("Pad")
def _pad(node, ins):
    x = ins[0]
    mode = node.attrs.get("mode", "constant")
    if node.opset < 11:
        pads, value, axes = list(node.attrs["pads"]), node.attrs.get("value", 0.0), None
    else:
        pads = ints(ins[1])
        value = ins[2].item() if len(ins) > 2 and ins[2] is not None and ins[2].numel() else 0.0
        axes = ints(ins[3]) if len(ins) > 3 and ins[3] is not None else None
    axes = [norm_axis(a, x.dim()) for a in axes] if axes else list(range(x.dim()))
    n = len(axes)
    per_dim = {a: (pads[i], pads[i + n]) for i, a in enumerate(axes)}
    flat = []
    for d in reversed(range(x.dim())):
        flat += list(per_dim.get(d, (0, 0)))
    if mode == "constant":
        return F.pad(x, flat, value=value)
    torch_mode = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
    if torch_mode is None:
        raise Unsupported(f"Pad mode={mode!r}")
    # torch pads only trailing spatial dims for these modes: strip leading zero pads
    while flat and flat[-2:] == [0, 0]:
        flat = flat[:-2]
    return F.pad(x, flat, mode=torch_mode)


@converter("Cast")
def _cast(node, ins):
    dtype = ONNX_TO_TORCH.get(node.attrs["to"])
    if dtype is None:
        raise Unsupported(f"Cast to ONNX type {node.attrs['to']}")
    return ins[0].to(dtype)


@converter("CastLike")
def _cast_like(node, ins):
    return ins[0].to(ins[1].dtype)


@converter("NonZero")
def _nonzero(node, ins):
    return torch.nonzero(ins[0]).transpose(0, 1)


@converter("TopK")
def _topk(node, ins):
    x, k = ins[0], ints(ins[1])[0] if node.opset >= 10 else node.attrs["k"]
    axis = norm_axis(node.attrs.get("axis", -1), x.dim())
    values, idx = torch.topk(x, k, dim=axis, largest=bool(node.attrs.get("largest", 1)),
                             sorted=bool(node.attrs.get("sorted", 1)))
    return values, idx


@converter("OneHot")
def _one_hot(node, ins):
    idx, depth, values = ins
    depth = int(depth.reshape(-1)[0].item())
    axis = node.attrs.get("axis", -1)
    idx = _positive(idx.to(torch.int64), depth)
    hot = F.one_hot(idx.clamp(0, depth - 1), depth) * ((idx >= 0) & (idx < depth)).unsqueeze(-1)
    out = torch.where(hot.bool(), values[1], values[0])
    rank = out.dim()
    return out if norm_axis(axis, rank) == rank - 1 else out.movedim(-1, norm_axis(axis, rank))


@converter("Trilu")
def _trilu(node, ins):
    x = ins[0]
    k = ints(ins[1])[0] if len(ins) > 1 and ins[1] is not None else 0
    return torch.triu(x, k) if node.attrs.get("upper", 1) else torch.tril(x, k)


@converter("DepthToSpace")
def _depth_to_space(node, ins):
    x = ins[0]
    b = node.attrs["blocksize"]
    n, c, h, w = x.shape
    if node.attrs.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@converter("SpaceToDepth")
def _space_to_depth(node, ins):
    x = ins[0]
    b = node.attrs["blocksize"]
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)

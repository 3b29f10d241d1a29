"""Batch constants: shape constants whose value encodes the file's batch (DESIGN.md § Batch).

Deploy rewrites entry `index` of such a constant to value // file_batch x rows for the rows each rank runs.
Two kinds are found, both at ops that are batched and splittable:

1. *Direct*: the shape input of a Reshape or Expand (its entry on the output's batch axis), or the `ends`
   of a Slice on the batch axis, followed back through Concat, Cast, Identity and Unsqueeze to a constant.
2. *Batch-shaped constants*: an input with no batch axis that is the output of ConstantOfShape, or of a
   Tile or Expand of a tensor with dim 1 there, and that meets a batched tensor on its batch axis with the
   batch's size (a broadcast op, a Concat or Where across another axis). Its shape constant (the
   ConstantOfShape shape, the Tile repeats, the Expand shape) bakes the batch, or the op fails at other rows.
"""

from __future__ import annotations

import numpy as np

from tag.graph.op_families import BROADCAST_OPS
from tag.graph.op_families import norm_axis as _norm_axis
from tag.graph.opgraph import BatchConstant, Op, TensorInfo

_SHAPE_MAKERS = frozenset({"ConstantOfShape", "Tile", "Expand"})
_SAME_SHAPE = frozenset({"Cast", "CastLike", "Identity", "Neg", "Abs", "Relu", "Sqrt", "Exp", "Log", "Not"})
_CONCAT_LIKE = frozenset({"Concat"})


def dedupe_batch_constants(found: list[BatchConstant]) -> list[BatchConstant]:
    """`found` without repeats of a (tensor, index) entry (deploy rewrites each entry once), in order."""
    seen, out = set(), []
    for c in found:
        if (c.tensor, c.index) not in seen:
            seen.add((c.tensor, c.index))
            out.append(c)
    return out


def op_batch_constants(op: Op, ins, outs, file_batch: int, consts, tensors: dict[str, TensorInfo],
                       ops: list[Op]) -> list[BatchConstant]:
    """Batch constants read by batched, splittable `op` (both kinds of the module docstring).

    ins / outs: the op's TensorInfos (None for absent optional inputs); consts: name -> small integer value.
    """
    out = outs[0] if outs else None
    if out is None or out.batch_axis is None or out.shape is None:
        return []
    found = _direct(op, ins, out, file_batch, consts, tensors, ops)
    for u in ins:
        if u is not None and u.batch_axis is None and u.shape is not None:
            c = _batch_shaped(op, u, out, file_batch, consts, tensors, ops)
            if c is not None:
                found.append(c)
    return found


def _direct(op, ins, out, file_batch, consts, tensors, ops) -> list[BatchConstant]:
    """Reshape/Expand shape and Slice ends entries on the batch axis."""
    if len(ins) < 2 or ins[1] is None:
        return []
    b = out.batch_axis
    if op.op_type in ("Reshape", "Expand"):
        index = b - (len(out.shape) - _length(ins[1]))
        found = _const_entry(ins[1].name, index, consts, tensors, ops)
        if found and found[2] == out.shape[b] and found[2] % file_batch == 0 and (op.op_type == "Reshape" or found[2] > 1):
            return [BatchConstant(*found)]
    if op.op_type == "Slice" and len(ins) >= 3 and ins[2] is not None:
        axes = list(range(len(out.shape)))
        if len(ins) > 3 and ins[3] is not None and ins[3].name in consts:
            axes = [_norm_axis(int(v), len(out.shape)) for v in np.ravel(consts[ins[3].name])]
        if b in axes:
            found = _const_entry(ins[2].name, axes.index(b), consts, tensors, ops)
            if found and found[2] == file_batch:
                return [BatchConstant(*found)]
    return []


def _batch_shaped(op, u: TensorInfo, out: TensorInfo, file_batch, consts, tensors, ops) -> BatchConstant | None:
    """The shape-constant entry baking the batch into unbatched input `u` of `op` (None if there is none)."""
    batch_dim = out.shape[out.batch_axis]
    if op.op_type in BROADCAST_OPS:
        if batch_dim == 1:
            return None  # a dim of 1 broadcasts to any row count
        bu = out.batch_axis - (len(out.shape) - len(u.shape))
    elif op.op_type in _CONCAT_LIKE:
        axis = _norm_axis(int(op.attrs.get("axis", 0)), len(out.shape))
        if axis == out.batch_axis or len(u.shape) != len(out.shape):
            return None
        bu = out.batch_axis
    else:
        return None
    if not 0 <= bu < len(u.shape) or u.shape[bu] != batch_dim or batch_dim % max(file_batch, 1) != 0:
        return None
    p = _maker(u, tensors, ops)
    if p is None or any(tensors[i].batch_axis is not None for i in p.inputs if i and i in tensors):
        return None
    made = tensors[p.outputs[0]]
    if made.shape is None or len(made.shape) != len(u.shape):
        return None
    if p.op_type == "ConstantOfShape":
        found = _const_entry(p.inputs[0], bu, consts, tensors, ops) if p.inputs else None
    else:
        src = tensors.get(p.inputs[0]) if p.inputs else None
        if src is None or src.shape is None or len(p.inputs) < 2:
            return None
        k = bu - (len(made.shape) - len(src.shape))
        if 0 <= k < len(src.shape) and src.shape[k] != 1:
            return None  # the batch-sized dim comes from the source, not from the constant
        index = bu if p.op_type == "Tile" else bu - (len(made.shape) - _length(tensors[p.inputs[1]]))
        found = _const_entry(p.inputs[1], index, consts, tensors, ops) if p.inputs[1] in tensors else None
    if found and found[2] == batch_dim:
        return BatchConstant(*found)
    return None


def _maker(u: TensorInfo, tensors, ops, depth: int = 0) -> Op | None:
    """The ConstantOfShape/Tile/Expand behind `u`, through same-shape unary ops."""
    if u.producer is None or depth > 8:
        return None
    p = ops[u.producer]
    if p.op_type in _SHAPE_MAKERS:
        return p
    if p.op_type in _SAME_SHAPE and p.inputs and p.inputs[0] in tensors and tensors[p.inputs[0]].shape == u.shape:
        return _maker(tensors[p.inputs[0]], tensors, ops, depth + 1)
    return None


def _length(t: TensorInfo) -> int:
    return int(t.shape[0]) if t.shape else 0


def _const_entry(name, index, consts, tensors, ops, depth=0):
    """(constant tensor, index, value) behind entry `index` of a 1-D shape tensor, following Concat/Cast/Unsqueeze."""
    if index < 0 or depth > 8 or name not in tensors:
        return None
    if name in consts:
        v = np.ravel(consts[name])
        return (name, index, int(v[index])) if index < len(v) else None
    p = tensors[name].producer
    if p is None:
        return None
    op = ops[p]
    if op.op_type in ("Cast", "Identity", "Unsqueeze") and op.inputs:
        return _const_entry(op.inputs[0], index, consts, tensors, ops, depth + 1)
    if op.op_type == "Concat":
        start = 0
        for i in op.inputs:
            n = _length(tensors[i]) if i in tensors and tensors[i].shape else (1 if i in tensors and tensors[i].shape == () else 0)
            if start <= index < start + max(n, 1):
                return _const_entry(i, index - start, consts, tensors, ops, depth + 1)
            start += max(n, 1)
    return None

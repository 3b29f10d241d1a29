"""Batch-valued shape arithmetic: integer entries that equal the row count, and tensors they give rows to.

The exporters build the causal mask of transformers from the batch read off a shape:
``b = Squeeze(Shape(input_ids, end=1)); arange = Range(0, b, 1)``, then Unsqueeze/Max/Expand it to
[B, 1, S, S]; attention masks are ``Expand(ones[1, S], Concat(Reshape(b), [S]))``. No input of those
ops is batched, yet their outputs have B rows. This pass tracks, for every small integer tensor, the flat
positions whose value is the row count of the call (`BatchValues`: tensor -> frozenset of flat indices),
and gives a batch axis to the outputs that take their extent from such an entry ("born" batched):

- Shape(x) of a batched x whose batch dim is exactly the rows (one entry per row): position a - start.
- Cast, CastLike, Identity, Squeeze, Unsqueeze, Reshape, Flatten keep flat positions (row-major order).
- Gather(v, const idx): the output positions whose index names a tracked position. Concat of 1-D inputs:
  positions shifted by the lengths before them.
- Range(0, b, 1) with b tracked: batch axis 0. Expand(x, shape) with x unbatched and shape entry i
  tracked: the output axis i aligned right (x's dim there must be 1 or absent). ConstantOfShape(shape): i.

A born tensor is splittable: every rank computes it from its own rows, so its values are local row
indices (0..n-1), which is what its consumers (a mask gathered against tensors of the same rows) read.
"""

from __future__ import annotations

import numpy as np

from tag.graph.opgraph import Op, TensorInfo

BatchValues = dict[str, frozenset]
_KEEP = frozenset("Cast CastLike Identity Squeeze Unsqueeze Reshape Flatten".split())


def _numel(t: TensorInfo | None) -> int | None:
    if t is None or t.shape is None:
        return None
    return int(np.prod(t.shape)) if t.shape else 1


def track(op: Op, view: dict[str, TensorInfo], bv: BatchValues, values: dict, batch_dim: int | None) -> None:
    """Record the tracked positions of `op`'s output in `bv` (nothing when it has none)."""
    if not op.outputs or not op.outputs[0]:
        return
    out, t = op.outputs[0], op.op_type
    ins = [i for i in op.inputs]
    found: set[int] = set()
    if t == "Shape" and ins and ins[0] in view:
        x = view[ins[0]]
        if x.batch_axis is not None and x.shape is not None and batch_dim and x.shape[x.batch_axis] == batch_dim:
            rank = len(x.shape)
            start = op.attrs.get("start", 0)
            end = op.attrs.get("end", rank)
            start, end = (start + rank if start < 0 else start), (end + rank if end < 0 else end)
            start, end = max(0, min(start, rank)), max(0, min(end, rank))
            if start <= x.batch_axis < end:
                found.add(x.batch_axis - start)
    elif t in _KEEP and ins and ins[0] in bv and _numel(view.get(ins[0])) == _numel(view.get(out)):
        found |= bv[ins[0]]
    elif t == "Gather" and len(ins) > 1 and ins[0] in bv and ins[1] in values and op.attrs.get("axis", 0) == 0:
        v = view.get(ins[0])
        n = int(v.shape[0]) if v is not None and v.shape else 1
        idx = np.ravel(np.asarray(values[ins[1]])).astype(np.int64)
        found |= {j for j, k in enumerate(idx) if int(k) % max(n, 1) in bv[ins[0]]}
    elif t == "Concat":
        pos = 0
        for i in ins:
            n = _numel(view.get(i)) if i else 0
            if n is None:
                return
            found |= {pos + p for p in bv.get(i, ())}
            pos += n
    if found:
        bv[out] = frozenset(found)


def born_axis(op: Op, view: dict[str, TensorInfo], bv: BatchValues, values: dict) -> int | None:
    """The batch axis `op`'s output takes from a tracked entry (see the module docstring), or None."""
    t, ins = op.op_type, op.inputs
    out = view.get(op.outputs[0]) if op.outputs and op.outputs[0] else None
    if out is None or out.shape is None:
        return None
    if t == "Range" and len(ins) == 3 and bv.get(ins[1]) == frozenset({0}):
        start, delta = values.get(ins[0]), values.get(ins[2])
        if start is not None and delta is not None and int(np.ravel(start)[0]) == 0 and int(np.ravel(delta)[0]) == 1:
            return 0
        return None
    if t in ("Expand", "ConstantOfShape"):
        shape_in = ins[1] if t == "Expand" and len(ins) > 1 else (ins[0] if t == "ConstantOfShape" and ins else None)
        pos = bv.get(shape_in) if shape_in else None
        if not pos or len(pos) != 1:
            return None
        length = _numel(view.get(shape_in))
        if length is None:
            return None
        b = len(out.shape) - length + next(iter(pos))
        if not 0 <= b < len(out.shape):
            return None
        if t == "Expand":
            x = view.get(ins[0])
            if x is None or x.shape is None:
                return None
            k = b - (len(out.shape) - len(x.shape))
            if 0 <= k < len(x.shape) and x.shape[k] != 1:
                return None
        return b
    return None


def gather_nd_rule(data: TensorInfo, indices: TensorInfo, out: TensorInfo, batch_dims: int) -> tuple[list, bool]:
    """GatherND: output = indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1]:].

    Batched indices (axis a < rank - 1) put the batch on output axis a. Splittable when data is unbatched, or
    when both carry the batch on axis 0 (the exporters' mask gather: the indices' row component comes from a
    born Range of the same rank's rows, so it is a local row index); otherwise not.
    """
    if indices is None or indices.shape is None or out.shape is None:
        return [None], False
    a = indices.batch_axis
    if a is not None and a < len(indices.shape) - 1:
        ok = data.batch_axis is None or (data.batch_axis == 0 and a == 0 and batch_dims == 0)
        return [a], ok
    return [None], False

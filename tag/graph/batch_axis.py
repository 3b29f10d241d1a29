"""Batch-axis analysis: which axis of every tensor carries batch rows, which ops can split rows.

Rows start on axis 0 of every data input and are propagated through the ops in topological order by
per-op rules (broadcasting, products, reshapes by prefix products, transposes, gathers, reductions).
An op is *unsplittable* when its rows are not independent: it reduces, normalises, slices, concatenates
or contracts across the batch axis, or its rows are interleaved with another dim (a reshape of (S, B, E) to
(S*B, E), as torch's MultiheadAttention exports; costs still scale with rows there). An op is `batched` when
it reads a batched tensor (its work scales with rows), except Shape/Size, whose outputs carry no rows;
ops reading no batched tensor (shape arithmetic, weight generators) are not batched; CastLike's second input
gives only a dtype, so it carries no rows through. A sequence (tag.graph.sequences) carries the batch axis of
the tensor it was split from; SequenceAt hands it to the element. Shape constants that
encode the file's batch on the batch axis yield `BatchConstant`s (tag.graph.batch_constants) that deploy
rewrites for the rows each rank runs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tag.graph.batch_constants import dedupe_batch_constants, op_batch_constants
from tag.graph.batch_values import born_axis, gather_nd_rule, track
from tag.graph.op_families import BROADCAST_OPS, DATA_DEPENDENT_OPS, REDUCE_OPS, SHAPE_OUTPUT_OPS, TYPE_ONLY_INPUTS
from tag.graph.op_families import norm_axis as _norm_axis
from tag.graph.opgraph import BatchConstant, Op, TensorInfo
from tag.graph.sequences import concat_from_sequence_rule, sequence_at_rule


def propagate_batch(ops: list[Op], tensors: dict[str, TensorInfo], data_inputs: list[str], file_batch: int,
                    consts: dict[str, np.ndarray], opset: int, values: dict | None = None,
                    probe_shapes: dict | None = None) -> list[BatchConstant]:
    """Set `batch_axis` on every tensor and `batched`/`splittable` on every op; return the batch constants.

    Ops are visited in topological order; data inputs carry rows on axis 0. `consts`: values fixed by the
    file's constants (batch constants are found among them); `values`: every small value known at the file's
    batch, including shape arithmetic (used to read axes inputs). `probe_shapes`: shapes completed at a
    second batch (> 1) where the file's batch is symbolic; the rules read them where known, because a batch
    of 1 makes a merged or squeezed batch axis ambiguous.
    """
    values = {**(values or {}), **consts}
    view = tensors
    if probe_shapes:
        view = {n: replace(t, shape=probe_shapes.get(n) or t.shape) for n, t in tensors.items()}
    for name in data_inputs:
        view[name].batch_axis = 0
    layout: dict[str, tuple[int, int]] = {}  # tensor -> (outer, extent): batch axis dim = outer x extent x inner
    bv: dict = {}  # tensor -> flat positions holding the row count (tag.graph.batch_values)
    first = view[data_inputs[0]] if data_inputs else None
    batch_dim = int(first.shape[0]) if first is not None and first.shape else None
    for op in ops:
        track(op, view, bv, values, batch_dim)
        ins = [view[i] if i else None for i in op.inputs]
        if op.op_type in TYPE_ONLY_INPUTS:  # CastLike reads only the dtype of its second input
            ins = [t if k not in TYPE_ONLY_INPUTS[op.op_type] else None for k, t in enumerate(ins)]
        outs = [view[o] for o in op.outputs if o]
        batched_in = [t for t in ins if t is not None and t.batch_axis is not None]
        if not batched_in:
            op.batched, op.splittable = False, True
            b = born_axis(op, view, bv, values)
            if b is not None:  # batched by a shape entry that is the row count: every rank builds its own rows
                view[op.outputs[0]].batch_axis, op.batched = b, True
            continue
        x = batched_in[0]
        x_layout = layout.get(x.name, (1, x.shape[x.batch_axis] if x.shape is not None else 0))
        if op.op_type in ("Reshape", "Flatten") and x.shape is not None and outs and outs[0].shape is not None:
            b, outer, extent = reshape_layout(x.shape, x.batch_axis, x_layout, outs[0].shape)
            axes, split = [b], b is not None and outer == 1
            if b is not None:
                layout[outs[0].name] = (outer, extent)
        else:
            axes, split = _rule(op, ins, outs, opset, values, ops)
            axes = [a if (a is not None and t.shape is not None and 0 <= a < len(t.shape)) else None
                    for t, a in zip(outs, axes)]
            for t, a in zip(outs, axes):
                if x.name in layout and a is not None and t.shape[a] == x.shape[x.batch_axis]:
                    layout[t.name] = layout[x.name]
        if any(layout.get(t.name, (1, 0))[0] > 1 for t in batched_in):
            split = False  # rows interleaved with an outer dim: not contiguous slices
        for t, a in zip(outs, axes):
            t.batch_axis = a if (a is not None and t.shape is not None and a < len(t.shape)) else None
        op.splittable = bool(split)
        op.batched = op.op_type not in SHAPE_OUTPUT_OPS
    found: list[BatchConstant] = []
    for n, t in view.items():
        tensors[n].batch_axis = t.batch_axis if tensors[n].shape is not None else None
    for op in ops:
        if op.batched and op.splittable:
            ins = [tensors[i] if i else None for i in op.inputs]
            outs = [tensors[o] for o in op.outputs if o]
            found += op_batch_constants(op, ins, outs, file_batch, consts, tensors, ops)
    return dedupe_batch_constants(found)


def _rule(op: Op, ins, outs, opset: int, consts, ops: list[Op]) -> tuple[list[int | None], bool]:
    t, a0 = op.op_type, op.attrs
    x = next(i for i in ins if i is not None and i.batch_axis is not None)
    n_out = len(outs)
    if t in SHAPE_OUTPUT_OPS:
        return [None] * n_out, True
    if not outs or outs[0].shape is None:
        return [None] * n_out, False  # unknown output shape: no batch axis to follow
    if t in DATA_DEPENDENT_OPS or any(i is None or i.shape is None for i in ins if i is not None and i.batch_axis is not None):
        return [None] * n_out, False
    if t in BROADCAST_OPS:
        return _broadcast(ins, outs)
    if t == "MatMul" or t == "MatMulInteger" or t == "FusedMatMul":
        return _matmul(ins, outs)
    if t == "Gemm":
        return _gemm(ins, a0)
    if t == "Einsum":
        return _einsum(ins, a0.get("equation", ""), n_out)
    if t in ("Reshape", "Flatten"):
        return _reshape(x, outs[0])
    if t in ("Squeeze", "Unsqueeze"):
        return _squeeze(t, x, ins, outs[0], a0, consts)
    if t == "Transpose":
        perm = list(a0.get("perm") or reversed(range(len(x.shape))))
        return [perm.index(x.batch_axis)], True
    if t == "Gather":
        return _gather(ins, outs[0], a0.get("axis", 0))
    if t == "GatherND":
        return gather_nd_rule(ins[0], ins[1], outs[0], a0.get("batch_dims", 0))
    if t in REDUCE_OPS:
        return _reduce(t, x, ins, a0, consts, opset)
    if t in ("Softmax", "LogSoftmax", "Hardmax"):
        axis = _norm_axis(a0.get("axis", 1 if opset < 13 else -1), len(x.shape))
        bad = x.batch_axis >= axis if opset < 13 else x.batch_axis == axis
        return [x.batch_axis], not bad
    if t in ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization"):
        axis = _norm_axis(a0.get("axis", -1), len(x.shape))
        return [x.batch_axis] + [None] * (n_out - 1), x.batch_axis < axis
    if t in ("Concat", "Split", "CumSum", "TopK", "GatherElements", "ScatterElements", "ReverseSequence", "LpNormalization"):
        axis = a0.get("axis", -1 if t in ("TopK", "LpNormalization") else 0)
        if t == "CumSum":  # the axis is input 1 (unknown: assume the batch axis, unsplittable)
            c = consts.get(ins[1].name) if len(ins) > 1 and ins[1] is not None else None
            axis = int(np.ravel(c)[0]) if c is not None else x.batch_axis
        axis = _norm_axis(axis, len(x.shape))
        return _same_rank(x, outs, axis != x.batch_axis)
    if t == "SplitToSequence":  # the sequence's recorded shape is its input's (tag.graph.sequences)
        axis = _norm_axis(a0.get("axis", 0), len(x.shape))
        return _same_rank(x, outs, axis != x.batch_axis)
    if t == "SequenceAt":
        return sequence_at_rule(x, outs[0], ops)
    if t == "ConcatFromSequence":
        return concat_from_sequence_rule(x, outs[0], a0, ops)
    if t in ("LSTM", "GRU", "RNN"):  # X [T, B, I] -> Y [T, D, B, H], Y_h / Y_c [D, B, H]; layout 1: batch first
        layout = int(a0.get("layout", 0))
        xb = ins[0].batch_axis if ins[0] is not None else None
        if xb != (0 if layout else 1):
            return [None] * n_out, False
        return [(0 if layout else 2) if k == 0 else (0 if layout else 1) for k in range(n_out)], True
    if t == "BatchNormalization":  # training mode splits too: deploy sums the statistics over the replicas
        return _same_rank(x, outs[:1], x.batch_axis == 0) if n_out == 1 \
            else ([x.batch_axis] + [None] * (n_out - 1), x.batch_axis == 0)
    return _same_rank(x, outs, True)


def _same_rank(x: TensorInfo, outs, ok: bool) -> tuple[list[int | None], bool]:
    """Generic rule: the batch axis keeps its index (right-aligned when ranks differ) if its size is kept."""
    axes = []
    for o in outs:
        if o.shape is None:
            axes.append(None)
            continue
        b = x.batch_axis + (len(o.shape) - len(x.shape)) if len(o.shape) >= len(x.shape) else x.batch_axis
        axes.append(b if 0 <= b < len(o.shape) and o.shape[b] == x.shape[x.batch_axis] else None)
    return axes, ok and all(a is not None for a in axes[:1])


def _broadcast(ins, outs):
    out = outs[0]
    cands = set()
    for t in ins:
        if t is not None and t.batch_axis is not None:
            cands.add(t.batch_axis + len(out.shape) - len(t.shape))
    if len(cands) != 1:
        return [None] * len(outs), False
    return _same_rank_at(outs, cands.pop())


def _same_rank_at(outs, b):
    return [b if o.shape is not None and b < len(o.shape) else None for o in outs], True


def _matmul(ins, outs):
    out_rank = len(outs[0].shape)
    cands, ok = set(), True
    for k, t in enumerate(ins[:2]):
        if t is None or t.batch_axis is None:
            continue
        r, a = len(t.shape), t.batch_axis
        if r < 2:
            return [None], False
        contraction = r - 1 if k == 0 else r - 2
        if a == contraction:
            ok = False
        elif a >= r - 2:
            cands.add(out_rank - 2 if k == 0 else out_rank - 1)
        else:
            cands.add(a + out_rank - r)
    if not ok or len(cands) != 1:
        return [None] * len(outs), False
    return [cands.pop()] + [None] * (len(outs) - 1), True


def _gemm(ins, attrs):
    a, b = ins[0], ins[1]
    cands, ok = set(), True
    if a.batch_axis is not None:
        row = 1 if attrs.get("transA", 0) else 0
        ok &= a.batch_axis == row
        cands.add(0)
    if b is not None and b.batch_axis is not None:
        col = 0 if attrs.get("transB", 0) else 1
        ok &= b.batch_axis == col
        cands.add(1)
    if not ok or len(cands) != 1:
        return [None], False
    return [cands.pop()], True


def expand_einsum(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Split an einsum equation into per-operand subscripts and output, expanding '...' to placeholders."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    ell_len = 0
    out_terms = []
    for term, r in zip(terms, ranks):
        if "..." in term:
            n = r - (len(term) - 3)
            ell_len = max(ell_len, n)
            term = term.replace("...", "".join(chr(0x391 + i + (ell_len - n)) for i in range(n)))
        out_terms.append(term)
    ell = "".join(chr(0x391 + i) for i in range(ell_len))
    if "->" in eq:
        rhs = rhs.replace("...", ell)
    else:
        letters = [c for term in out_terms for c in term if c not in ell]
        rhs = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return out_terms, rhs


def _einsum(ins, equation, n_out):
    try:
        terms, rhs = expand_einsum(equation, [len(t.shape) if t is not None and t.shape is not None else 0 for t in ins])
    except Exception:
        return [None] * n_out, False
    cands = set()
    for t, term in zip(ins, terms):
        if t is None or t.batch_axis is None:
            continue
        if t.batch_axis >= len(term) or term[t.batch_axis] not in rhs:
            return [None] * n_out, False
        cands.add(rhs.index(term[t.batch_axis]))
    if len(cands) != 1:
        return [None] * n_out, False
    return [cands.pop()], True


def reshape_layout(in_shape, a: int, layout: tuple[int, int], out_shape):
    """Where the batch lands in a reshape: (output axis, outer factor, batch extent), axis None if split apart.

    The input's batch axis `a` has dim = outer x extent x inner (`layout` = (outer, extent)). The batch starts
    at element offset P = prod(in_shape[:a]) x outer; it lands on output axis b whose prefix product divides P
    and whose span holds P x extent. Exact matches (outer 1, dim == extent) win, then the first axis.

    >>> reshape_layout((7, 16, 64), 0, (1, 7), (112, 64))   # batch outer in a merged axis
    (0, 1, 7)
    >>> reshape_layout((16, 7, 64), 1, (1, 7), (112, 64))   # batch inside a merged axis
    (0, 16, 7)
    """
    outer, extent = layout
    p_in = int(np.prod(in_shape[:a])) * outer if a else outer
    cands = []
    prefix = 1
    for b, d in enumerate(out_shape):
        if prefix > p_in:
            break
        if p_in % prefix == 0 and (prefix * d) % (p_in * extent) == 0:
            new_outer = p_in // prefix
            cands.append((not (new_outer == 1 and d == extent), b, new_outer))
        prefix *= d
    if not cands:
        return None, 1, extent
    _, b, new_outer = min(cands)
    return b, new_outer, extent


def _reshape(x: TensorInfo, out: TensorInfo):
    """Reshape/Flatten: the batch axis is the output axis starting at the same element offset (prefix product)."""
    if out.shape is None:
        return [None], False
    a, shp = x.batch_axis, x.shape
    prefix = int(np.prod(shp[:a])) if a else 1
    best = None
    for b in range(len(out.shape)):
        p = int(np.prod(out.shape[:b])) if b else 1
        if p == prefix:
            d = out.shape[b]
            if d == shp[a]:
                return [b], True
            if best is None and d > 0 and (d % shp[a] == 0 or shp[a] % d == 0):
                best = b
        elif p > prefix:
            break
    return [best], best is not None


def _axes_arg(op_attrs, ins, consts, index=1):
    axes = op_attrs.get("axes")
    if axes is None and len(ins) > index and ins[index] is not None and ins[index].name in consts:
        axes = [int(v) for v in np.ravel(consts[ins[index].name])]
    return axes


def _squeeze(t, x, ins, out, attrs, consts):
    if out.shape is None:
        return [None], False
    axes = _axes_arg(attrs, ins, consts)
    a = x.batch_axis
    if axes is None:
        if t == "Squeeze" and x.shape[a] == 1:
            return [None], False
        return _reshape(x, out)
    if t == "Squeeze":
        axes = [_norm_axis(v, len(x.shape)) for v in axes]
        if a in axes:
            return [None], False
        return [a - sum(1 for v in axes if v < a)], True
    axes = sorted(_norm_axis(v, len(out.shape)) for v in axes)
    b = a
    for v in axes:
        if v <= b:
            b += 1
    return [b], True


def _gather(ins, out, axis):
    data, idx = ins[0], ins[1]
    axis = _norm_axis(axis, len(data.shape))
    if data.batch_axis is not None and idx is not None and idx.batch_axis is not None:
        return [None], False
    if data.batch_axis is not None:
        a = data.batch_axis
        if a == axis:
            return [None], False
        return [a if a < axis else a + len(idx.shape) - 1], True
    return [axis + idx.batch_axis], True


def _reduce(t, x, ins, attrs, consts, opset):
    keep = attrs.get("keepdims", 1)
    if t in ("ArgMax", "ArgMin"):
        axes = [attrs.get("axis", 0)]
    else:
        axes = _axes_arg(attrs, ins, consts)
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x.batch_axis], True
        return [None], False
    axes = [_norm_axis(v, len(x.shape)) for v in axes]
    a = x.batch_axis
    if a in axes:
        return [None], False
    return [a if keep else a - sum(1 for v in axes if v < a)], True


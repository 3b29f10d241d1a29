"""ONNX sequence ops: element shapes, and the one shape tag records for a sequence tensor.

The dynamo exporter writes ``torch.split`` / ``chunk`` (GPT-2's fused QKV projection) as
``SplitToSequence(x, split, axis, keepdims) -> seq`` followed by one ``SequenceAt(seq, i)`` per chunk.
ONNX semantics (opset 11+):

- SplitToSequence: ``split`` absent -> chunks of size 1 on ``axis``, squeezed away when ``keepdims`` is 0;
  a scalar -> chunks of that size (the last one smaller when it does not divide); a 1-D tensor -> those sizes.
- SequenceAt(seq, position): element ``position`` (negative counts from the end).
- SequenceConstruct(x0, ..., xn-1): the sequence of its inputs. SequenceLength: an int64 scalar.
- ConcatFromSequence(seq, axis, new_axis): the elements concatenated on ``axis`` (stacked on a new axis
  when ``new_axis`` is 1).

A sequence tensor has no tensor shape of its own; tag records for it the shape of its elements
concatenated on the split axis (for SplitToSequence: the shape of the tensor it splits), so its bytes are
the bytes of its elements and its batch axis is theirs where the split keeps them. The batch-axis rules of
SequenceAt and ConcatFromSequence (used by tag.graph.batch_axis) read it from there.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tag.graph.op_families import norm_axis
from tag.graph.opgraph import Op, TensorInfo

SEQUENCE_OPS = frozenset("""SplitToSequence SequenceAt SequenceConstruct SequenceLength ConcatFromSequence
SequenceEmpty SequenceInsert SequenceErase""".split())
SEQUENCE_PRODUCERS = frozenset("SplitToSequence SequenceConstruct SequenceEmpty SequenceInsert SequenceErase".split())

Shape = tuple[int, ...]


def split_to_sequence_shapes(in_shape: Shape, axis: int, split: np.ndarray | None, keepdims: int = 1) -> list[Shape] | None:
    """Element shapes of ``SplitToSequence(x, split, axis, keepdims)`` for x of `in_shape` (None if invalid).

    >>> split_to_sequence_shapes((2, 16, 192), 2, np.array(64))
    [(2, 16, 64), (2, 16, 64), (2, 16, 64)]
    >>> split_to_sequence_shapes((2, 3), 1, None, keepdims=0)
    [(2,), (2,), (2,)]
    >>> split_to_sequence_shapes((5, 4), 0, np.array(2))
    [(2, 4), (2, 4), (1, 4)]
    """
    a = norm_axis(int(axis), len(in_shape))
    if not 0 <= a < len(in_shape):
        return None
    n = int(in_shape[a])
    if split is None:
        if keepdims:
            return [in_shape[:a] + (1,) + in_shape[a + 1:]] * n
        return [in_shape[:a] + in_shape[a + 1:]] * n
    split = np.asarray(split)
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            return None
        sizes = [min(size, n - s) for s in range(0, n, size)]
    else:
        sizes = [int(v) for v in split.ravel()]
        if sum(sizes) != n or any(v < 0 for v in sizes):
            return None
    return [in_shape[:a] + (s,) + in_shape[a + 1:] for s in sizes]


def split_axis(node_attrs: dict, rank: int) -> int:
    """The split axis of a SplitToSequence node (attrs: name -> value) on an input of `rank` dims."""
    return norm_axis(int(node_attrs.get("axis", 0)), rank)


def _attrs(n: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def fill_sequence_shapes(nodes, dtypes: dict, shapes: dict, values: dict) -> list[str]:
    """Shapes of sequence tensors (the recorded shape above) and of tensors read out of them.

    nodes: ONNX nodes in any order (a sequence's producer may follow its reader in file order; the pass
    repeats until nothing changes). dtypes / shapes (name -> numpy dtype name / tuple or None) are
    extended in place where unknown; values: name -> known small values (split sizes, positions).
    Returns the names whose shapes this call filled.
    """
    elements: dict[str, list[Shape]] = {}
    filled: list[str] = []

    def put(name, shape, dtype):
        if name and shapes.get(name) is None and shape is not None:
            shapes[name] = tuple(int(d) for d in shape)
            dtypes[name] = dtype
            filled.append(name)

    changed = True
    while changed:
        changed = False
        for n in nodes:
            t = n.op_type
            if t not in SEQUENCE_OPS or n.domain not in ("", "ai.onnx"):
                continue
            out = n.output[0] if n.output else ""
            before = len(filled) + len(elements)
            if t == "SplitToSequence" and out not in elements:
                x = shapes.get(n.input[0])
                if x is None:
                    continue
                a = _attrs(n)
                split = None
                if len(n.input) > 1 and n.input[1]:
                    if n.input[1] not in values:
                        continue
                    split = values[n.input[1]]
                elems = split_to_sequence_shapes(tuple(x), a.get("axis", 0), split, a.get("keepdims", 1))
                if elems is None:
                    continue
                elements[out] = elems
                put(out, x, dtypes.get(n.input[0], "float32"))
            elif t == "SequenceConstruct" and out not in elements:
                ins = [shapes.get(i) for i in n.input]
                if any(s is None for s in ins):
                    continue
                elements[out] = [tuple(s) for s in ins]
                if ins and all(len(s) == len(ins[0]) and tuple(s[1:]) == tuple(ins[0][1:]) for s in ins):
                    put(out, (sum(s[0] for s in ins),) + tuple(ins[0][1:]), dtypes.get(n.input[0], "float32"))
            elif t == "SequenceAt" and n.input[0] in elements and n.input[1] in values:
                elems = elements[n.input[0]]
                i = int(np.asarray(values[n.input[1]]).ravel()[0])
                if -len(elems) <= i < len(elems):
                    put(out, elems[i], dtypes.get(n.input[0], "float32"))
            elif t == "SequenceLength" and n.input[0] in elements:
                put(out, (), "int64")
                if out not in values:
                    values[out] = np.array(len(elements[n.input[0]]), dtype=np.int64)
            elif t == "ConcatFromSequence" and n.input[0] in elements:
                elems = elements[n.input[0]]
                a = _attrs(n)
                if not elems:
                    continue
                if a.get("new_axis", 0):
                    axis = norm_axis(int(a.get("axis", 0)), len(elems[0]) + 1)
                    put(out, elems[0][:axis] + (len(elems),) + elems[0][axis:], dtypes.get(n.input[0], "float32"))
                else:
                    axis = norm_axis(int(a.get("axis", 0)), len(elems[0]))
                    put(out, elems[0][:axis] + (sum(e[axis] for e in elems),) + elems[0][axis + 1:],
                        dtypes.get(n.input[0], "float32"))
            changed |= len(filled) + len(elements) != before
    return filled


def element_batch_axis(seq: TensorInfo, ops: list[Op]) -> int | None:
    """Batch axis of the elements of a sequence: the sequence's, one lower past an axis a split squeezed away
    (None for a sequence tag does not follow)."""
    a = seq.batch_axis
    p = ops[seq.producer] if seq.producer is not None else None
    if p is None or p.op_type not in ("SplitToSequence", "SequenceConstruct"):
        return None
    if p.op_type == "SplitToSequence":
        axis = norm_axis(p.attrs.get("axis", 0), len(seq.shape))
        squeezed = not p.attrs.get("keepdims", 1) and not (len(p.inputs) > 1 and p.inputs[1])
        if squeezed and axis < a:
            a -= 1
    return a


def sequence_at_rule(seq: TensorInfo, out: TensorInfo, ops: list[Op]) -> tuple[list[int | None], bool]:
    """Batch-axis rule of SequenceAt (tag.graph.batch_axis): the element has the elements' batch axis.

    Returns (output axes, splittable)."""
    a = element_batch_axis(seq, ops)
    if a is None or out.shape is None or not 0 <= a < len(out.shape) or out.shape[a] != seq.shape[seq.batch_axis]:
        return [None], False
    return [a], True


def concat_from_sequence_rule(seq: TensorInfo, out: TensorInfo, attrs, ops: list[Op]) -> tuple[list[int | None], bool]:
    """Batch-axis rule of ConcatFromSequence: the elements joined on `axis` (stacked on a new one with
    `new_axis`); joining on the batch axis mixes rows (unsplittable). Returns (output axes, splittable)."""
    a = element_batch_axis(seq, ops)
    if a is None or out.shape is None:
        return [None], False
    if attrs.get("new_axis", 0):
        axis = norm_axis(attrs.get("axis", 0), len(out.shape))
        b, ok = (a + 1 if axis <= a else a), True
    else:
        axis = norm_axis(attrs.get("axis", 0), len(out.shape))
        b, ok = a, axis != a
    if not 0 <= b < len(out.shape) or out.shape[b] != seq.shape[seq.batch_axis]:
        return [None], False
    return [b], ok

"""Converters for ONNX sequence ops (opset 11+): a sequence is a Python list of torch tensors.

The dynamo exporter writes ``torch.split`` / ``chunk`` (GPT-2's fused QKV projection) as
``SplitToSequence(x, split) -> seq`` and one ``SequenceAt(seq, i)`` per chunk. The elements are
``torch.split`` views of x, so autograd flows from each element back into x (gradients of unused elements
are zero). A converter returns ``(seq,)``: one output whose value is a list (a bare list would read as
several outputs). Semantics, for x of shape [d0, ..., d_{r-1}] and a = axis (negative counts from the end):

- SplitToSequence(x, split?, axis=0, keepdims=1): ``split`` absent -> d_a chunks of size 1, squeezed on
  ``a`` when keepdims is 0; a scalar s -> ceil(d_a / s) chunks of size s (the last one d_a mod s when s does
  not divide); a 1-D tensor -> chunks of those sizes (they sum to d_a). keepdims only matters without split.
- SequenceAt(seq, p): element p, p in [-n, n-1] for n elements.
- SequenceConstruct(x0, ..., xk): [x0, ..., xk]. SequenceEmpty(dtype): []. SequenceLength(seq): int64 n.
- SequenceInsert(seq, t, p?): a new list with t before element p (p in [-n, n]; absent: appended).
- SequenceErase(seq, p?): a new list without element p (p in [-n, n-1]; absent: the last).
- ConcatFromSequence(seq, axis, new_axis=0): torch.cat on ``axis``; new_axis 1 stacks on a new axis
  (axis in [-r-1, r] for elements of rank r).
Sequences are never folded at build time (their values are lists, not buffers); ops reading them run on
the tensors at hand, so a split of a batched tensor follows the actual row count.
"""

from __future__ import annotations

import torch

from tag.deploy.onnx_torch.ops_nn import Unsupported
from tag.deploy.onnx_torch.registry import converter, ints, norm_axis


def _position(p: torch.Tensor | None, n: int, default: int, inclusive_end: bool = False) -> int:
    """A sequence position as an index in [0, n) (or [0, n] with ``inclusive_end``); ``default`` when absent."""
    if p is None:
        return default
    vals = ints(p)
    if len(vals) != 1:
        raise Unsupported(f"sequence position must be a scalar, got {len(vals)} values")
    i = vals[0] + n if vals[0] < 0 else vals[0]
    hi = n if inclusive_end else n - 1
    if not 0 <= i <= hi:
        raise Unsupported(f"sequence position {vals[0]} out of range for a sequence of {n} elements")
    return i


@converter("SplitToSequence")
def _split_to_sequence(node, ins):
    x = ins[0]
    split = ins[1] if len(ins) > 1 else None
    axis = norm_axis(node.attrs.get("axis", 0), x.dim())
    if split is None:
        parts = torch.split(x, 1, dim=axis)
        if not node.attrs.get("keepdims", 1):
            parts = [p.squeeze(axis) for p in parts]
        return (list(parts),)
    if split.dim() == 0:
        size = int(split.item())
        if size <= 0:
            raise Unsupported(f"SplitToSequence split size {size} is not positive")
        return (list(torch.split(x, size, dim=axis)),)
    sizes = ints(split)
    if sum(sizes) != x.shape[axis]:
        raise Unsupported(f"SplitToSequence sizes {sizes} do not sum to dim {axis} ({x.shape[axis]})")
    return (list(torch.split(x, sizes, dim=axis)),)


@converter("SequenceAt")
def _sequence_at(node, ins):
    seq = ins[0]
    return seq[_position(ins[1], len(seq), 0)]


@converter("SequenceConstruct")
def _sequence_construct(node, ins):
    return (list(ins),)


@converter("SequenceEmpty")
def _sequence_empty(node, ins):
    return ([],)


@converter("SequenceLength")
def _sequence_length(node, ins):
    return torch.tensor(len(ins[0]), dtype=torch.int64)


@converter("SequenceInsert")
def _sequence_insert(node, ins):
    seq, t = ins[0], ins[1]
    i = _position(ins[2] if len(ins) > 2 else None, len(seq), len(seq), inclusive_end=True)
    return (list(seq[:i]) + [t] + list(seq[i:]),)


@converter("SequenceErase")
def _sequence_erase(node, ins):
    seq = ins[0]
    if not seq:
        raise Unsupported("SequenceErase on an empty sequence")
    i = _position(ins[1] if len(ins) > 1 else None, len(seq), len(seq) - 1)
    return (list(seq[:i]) + list(seq[i + 1:]),)


@converter("ConcatFromSequence")
def _concat_from_sequence(node, ins):
    seq = ins[0]
    if not seq:
        raise Unsupported("ConcatFromSequence of an empty sequence")
    new_axis = node.attrs.get("new_axis", 0)
    axis = norm_axis(node.attrs["axis"], seq[0].dim() + (1 if new_axis else 0))
    return torch.stack(seq, dim=axis) if new_axis else torch.cat(seq, dim=axis)

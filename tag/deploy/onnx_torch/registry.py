"""The table of ONNX op converters: op type -> a function computing the node's outputs with torch ops.

A converter is ``fn(node: NodeSpec, ins: list[Tensor | None]) -> Tensor | sequence of Tensor``. ``ins`` holds
the node's inputs in ONNX order (None for an omitted optional input); attributes are decoded once at build
time into ``node.attrs`` (ints, floats, str, lists, torch tensors). Converters use torch ops only, so autograd
flows through every float path; shape-valued inputs (Reshape targets, Slice bounds, ...) are read with
``ints(t)``, which keeps them on the actual row count because they come from ``Shape`` of real tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import torch
from onnx import numpy_helper

CONVERTERS: dict[str, Callable] = {}

# ONNX TensorProto data type -> torch dtype
ONNX_TO_TORCH = {
    onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16, onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT16: torch.int16, onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.UINT8: torch.uint8, onnx.TensorProto.BOOL: torch.bool,
}


@dataclass
class NodeSpec:
    """One ONNX node, decoded for execution (index = position in the topological order)."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    opset: int = 13
    fn: Callable | None = None


def converter(*op_types: str):
    """Register ``fn`` as the converter of the given op types."""
    def register(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn
    return register


def tensor_from_proto(t: onnx.TensorProto) -> torch.Tensor:
    """A TensorProto's value as a torch tensor (copied, so it is writable)."""
    arr = numpy_helper.to_array(t)
    return torch.from_numpy(np.array(arr, copy=True))


def decode_attrs(node: onnx.NodeProto) -> dict:
    """Node attributes as plain Python values (strings decoded, tensors converted to torch)."""
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8")
        elif isinstance(v, onnx.TensorProto):
            v = tensor_from_proto(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [s.decode("utf-8") for s in v]
        out[a.name] = v
    return out


def ints(t: torch.Tensor | None) -> list[int]:
    """A small integer tensor (a shape, axes, bounds) as a list of Python ints."""
    if t is None:
        return []
    return [int(v) for v in t.reshape(-1).tolist()]


def norm_axis(axis: int, rank: int) -> int:
    """An ONNX axis (possibly negative) as a non-negative axis of a rank-``rank`` tensor."""
    return axis + rank if axis < 0 else axis


def as_tuple(out) -> tuple:
    """A converter's result as a tuple of outputs."""
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(out)

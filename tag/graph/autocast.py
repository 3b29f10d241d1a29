"""Tensor dtypes under fp16 / bf16 autocast: one pass over an OpGraph, as tag's deploy runtime computes it.

``torch.autocast`` (CPU and CUDA alike) runs only the ops of its *lower-precision* list in 16 bits (matmul, mm,
bmm, linear, addmm, baddbmm, conv*; the torch.amp autocast op reference): their float inputs are cast to the
16-bit type (a fresh copy unless already 16-bit) and their output is 16-bit. Ops on its *fp32* list run in fp32
(CPU, torch 2.13: prod, 3-D max / average pooling, the losses; CUDA also softmax, log_softmax, exp, log, pow,
reciprocal, rsqrt, sum, cumsum, norms, layer_norm, group_norm, softplus, ...). Every other op runs in the dtype
type promotion gives its inputs: the highest float among inputs with at least one dimension, 0-dim tensors only
when no dimensioned input is float (so a bf16 product plus an fp32 bias vector is fp32, a bf16 product divided by
an fp32 scalar constant stays bf16); mixed 16-bit types promote to fp32.

Per ONNX op, as the deploy converters (`tag.deploy.onnx_torch`) run it (``out`` = the dtype of its float outputs):

* MatMul, Conv, ConvTranspose, Einsum, FusedMatMul: ``half``; Gemm: ``half``, then promoted with its C input
  (the converter adds C after the product: an fp32 bias vector gives fp32);
* ops whose converter runs an fp32-list op (`FP32_OPS` per device type): float32;
* Cast: its target; CastLike: its second input's dtype; Concat: its first input's (the converter casts the
  others); Pow: its base's; the data-movement and gather ops: their first input's;
* everything else (elementwise, normalisations, reductions, Softmax on CPU, ...): promotion of its float inputs.

Integer and boolean tensors keep the graph's dtype, and so does everything under fp32 and tf32.

Groups: deploy runs each op group as one unit whose float activation inputs from other groups arrive in the 16-bit
type (its input leaves are cast, `tag.deploy.runtime`: 16-bit activations between groups and devices). With
``groups`` given, an op reads such an input at ``half`` (`AutocastDtypes.seen`); the producer still holds its own
dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

HALF = {"fp16": "float16", "bf16": "bfloat16"}  # the mixed precisions (tag.strategy.memory_decisions) and their type
FLOATS = ("float16", "bfloat16", "float32", "float64")
LOWER_PRECISION_OPS = frozenset("MatMul Gemm Conv ConvTranspose Einsum FusedMatMul".split())
# ONNX ops whose converter runs a torch op on autocast's fp32 list (3-D pools: see `_fp32_op`)
FP32_OPS = {
    "cpu": frozenset("ReduceProd".split()),
    "cuda": frozenset("""ReduceProd Softmax LogSoftmax Exp Log Pow Reciprocal Softplus ReduceSum ReduceSumSquare
        ReduceL1 ReduceL2 ReduceLogSumExp CumSum LpNormalization LayerNormalization GroupNormalization Acos Asin
        Cosh Sinh Tan""".split()),
}
FIRST_INPUT_OPS = frozenset("""Reshape Flatten Squeeze Unsqueeze Transpose Slice Split Expand Tile Pad Identity
    Dropout DepthToSpace SpaceToDepth Resize Upsample Gather GatherElements GatherND ReverseSequence Trilu
    MaxPool GlobalMaxPool SplitToSequence SequenceAt""".split())


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name (numpy names plus "bfloat16"; 4 when unknown, as `TensorInfo`)."""
    if dtype == "bfloat16":
        return 2
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 4


def _float_join(a: str, b: str) -> str:
    """torch's promotion of two float dtypes (bf16 with fp16 gives fp32)."""
    if a == b:
        return a
    order = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
    if order[a] == order[b]:
        return "float32"
    return a if order[a] > order[b] else b


def promote(dims_dtypes: list[tuple[int, str]]) -> str | None:
    """torch's result dtype of float arithmetic over inputs given as (ndim, dtype): the float inputs with a
    dimension decide, 0-dim ones only when no dimensioned input is float. None when no input is float.

    >>> promote([(2, "bfloat16"), (1, "float32")]), promote([(4, "bfloat16"), (0, "float32")])
    ('float32', 'bfloat16')
    """
    floats = [(n, d) for n, d in dims_dtypes if d in FLOATS]
    if not floats:
        return None
    tier = [d for n, d in floats if n > 0] or [d for _, d in floats]
    out = tier[0]
    for d in tier[1:]:
        out = _float_join(out, d)
    return out


@dataclass
class AutocastDtypes:
    """Per tensor the dtype its producer computes it in (``produced``; graph inputs keep theirs), and what op
    groups deploy runs as units (``group_of``: op id -> group; empty = no boundaries). ``half``: the 16-bit type
    ("" under fp32 / tf32)."""

    half: str
    produced: dict[str, str]
    group_of: dict[int, int] = field(default_factory=dict)

    def seen(self, graph, op_id: int, name: str) -> str:
        """The dtype op `op_id` reads tensor `name` in: ``half`` for a float activation computed in another group
        (deploy's 16-bit input leaf), else as produced."""
        t = graph.tensors[name]
        d = self.produced.get(name, t.dtype)
        if self.half and d in FLOATS and self.crosses(graph, op_id, name):
            return self.half
        return d

    def crosses(self, graph, op_id: int, name: str) -> bool:
        """Whether `name` is an activation computed by an op of another group than `op_id`'s."""
        t = graph.tensors[name]
        return (bool(self.group_of) and t.role == "activation" and t.producer is not None
                and self.group_of.get(t.producer) != self.group_of.get(op_id))

    def computes(self, graph, op_id: int, name: str) -> str:
        """The dtype op `op_id` computes with input `name`: ``half`` for a float input of a lower-precision op
        (autocast casts it), else `seen`."""
        d = self.seen(graph, op_id, name)
        if self.half and d in FLOATS and graph.ops[op_id].op_type in LOWER_PRECISION_OPS:
            return self.half
        return d


def _ndim(t) -> int:
    return len(t.shape) if t.shape is not None else 1


def _fp32_op(op, device: str) -> bool:
    if op.op_type in FP32_OPS.get(device, FP32_OPS["cuda"]):
        return True
    # CPU autocast's fp32 list has max_pool3d and avg_pool3d
    return op.op_type in ("MaxPool", "AveragePool") and len(op.attrs.get("kernel_shape", ())) == 3


def output_dtype(graph, op_id: int, dt: AutocastDtypes, device: str = "cpu") -> str | None:
    """The dtype of op `op_id`'s float outputs under autocast (module docstring), None to keep the graph's."""
    op = graph.ops[op_id]
    ins = [(k, n) for k, n in enumerate(op.inputs) if n and n in graph.tensors]
    seen = {n: dt.seen(graph, op_id, n) for _, n in ins}
    t = op.op_type
    if op.op_class == "shape" or not ins:
        return None
    if t in LOWER_PRECISION_OPS:
        if t == "Gemm" and len(op.inputs) > 2 and op.inputs[2] in graph.tensors:
            c = graph.tensors[op.inputs[2]]
            return promote([(1, dt.half), (_ndim(c), seen[c.name])])
        return dt.half
    if _fp32_op(op, device):
        return "float32"
    if t == "Cast":
        return None
    if t == "CastLike" and len(op.inputs) > 1 and op.inputs[1] in seen:
        return seen[op.inputs[1]]
    if t in ("Concat", "Pow") or t in FIRST_INPUT_OPS or op.op_class == "data_movement":
        first = op.inputs[0]
        return seen.get(first)
    return promote([(_ndim(graph.tensors[n]), seen[n]) for _, n in ins])


def autocast_dtypes(graph, precision: str, groups=None, device: str = "cpu") -> AutocastDtypes:
    """Every graph tensor's dtype as computed under `precision` (module docstring).

    groups: op-id lists deploy runs as units (None: the whole graph is one unit). device: "cpu" or "cuda" (which
    fp32 list autocast applies).
    """
    half = HALF.get(precision, "")
    group_of = {i: k for k, ops in enumerate(groups or []) for i in ops}
    dt = AutocastDtypes(half, {n: t.dtype for n, t in graph.tensors.items()}, group_of)
    if not half:
        return dt
    for i, op in enumerate(graph.ops):
        d = output_dtype(graph, i, dt, device)
        if d is None:
            continue
        for o in op.outputs:
            if o and o in graph.tensors and graph.tensors[o].dtype in FLOATS:
                dt.produced[o] = d
    return dt

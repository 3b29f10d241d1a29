"""ONNX op families the batch-axis analysis, the batch-constant finder and the cost formulas share.

Names are ONNX op types (default domain). `norm_axis` maps a possibly negative ONNX axis into 0..rank-1.
"""

from __future__ import annotations

# ops whose outputs broadcast their inputs elementwise (numpy rules)
BROADCAST_OPS = frozenset("""Add Sub Mul Div Pow Sum Max Min Mean Where Equal Less Greater LessOrEqual GreaterOrEqual
And Or Xor Not Relu LeakyRelu PRelu Elu Selu Celu Sigmoid HardSigmoid HardSwish Tanh Exp Log Sqrt Reciprocal Neg Abs
Erf Ceil Floor Round Sign Clip Cast CastLike Identity Dropout Softplus Softsign Mish Gelu FastGelu BiasGelu QuickGelu
Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh IsNaN IsInf Mod BitShift ThresholdedRelu Shrink BitwiseAnd
BitwiseOr BitwiseXor BitwiseNot Expand""".split())
SHAPE_OUTPUT_OPS = frozenset("Shape Size SequenceLength".split())  # read a batched tensor, output no batch axis
TYPE_ONLY_INPUTS = {"CastLike": frozenset({1})}  # op type -> input indices read only for their dtype
DATA_DEPENDENT_OPS = frozenset("NonZero Unique Compress NonMaxSuppression".split())
REDUCE_OPS = frozenset("""ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum
ReduceLogSumExp ReduceSumSquare ArgMax ArgMin""".split())


def is_training_batchnorm(op) -> bool:
    """A BatchNormalization in training mode (``training_mode=1``, opset >= 14): it normalises with the batch's
    statistics, so splitting its rows needs their sum over the replicas, and a micro-batch's differ from the batch's."""
    return op.op_type == "BatchNormalization" and bool(op.attrs.get("training_mode", 0))


def norm_axis(axis: int, rank: int) -> int:
    """ONNX axis in -rank..rank-1 as 0..rank-1 (axis + rank when negative).

    >>> norm_axis(-1, 3), norm_axis(1, 3)
    (2, 1)
    """
    return axis + rank if axis < 0 else axis

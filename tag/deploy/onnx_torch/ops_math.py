"""Converters for elementwise math, products (MatMul, Gemm, Einsum), reductions and softmax."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tag.deploy.onnx_torch.registry import converter, ints, norm_axis

_UNARY = {
    "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Exp": torch.exp, "Log": torch.log,
    "Sqrt": torch.sqrt, "Abs": torch.abs, "Neg": torch.neg, "Reciprocal": torch.reciprocal,
    "Floor": torch.floor, "Ceil": torch.ceil, "Round": torch.round, "Sign": torch.sign, "Sin": torch.sin,
    "Cos": torch.cos, "Tan": torch.tan, "Erf": torch.erf, "Not": torch.logical_not, "IsNaN": torch.isnan,
    "Softsign": F.softsign, "Mish": F.mish, "Asin": torch.asin, "Acos": torch.acos, "Atan": torch.atan,
    "Sinh": torch.sinh, "Cosh": torch.cosh, "Asinh": torch.asinh, "Acosh": torch.acosh, "Atanh": torch.atanh,
    "BitwiseNot": torch.bitwise_not,
}
for _name, _fn in _UNARY.items():
    converter(_name)(lambda node, ins, _fn=_fn: _fn(ins[0]))


@converter("Identity")
def _identity(node, ins):
    return ins[0]


@converter("Softplus")
def _softplus(node, ins):
    return F.softplus(ins[0])


@converter("IsInf")
def _isinf(node, ins):
    x = ins[0]
    pos = torch.isposinf(x) if node.attrs.get("detect_positive", 1) else torch.zeros_like(x, dtype=torch.bool)
    neg = torch.isneginf(x) if node.attrs.get("detect_negative", 1) else torch.zeros_like(x, dtype=torch.bool)
    return pos | neg


@converter("LeakyRelu")
def _leaky(node, ins):
    return F.leaky_relu(ins[0], node.attrs.get("alpha", 0.01))


@converter("Elu")
def _elu(node, ins):
    return F.elu(ins[0], node.attrs.get("alpha", 1.0))


@converter("Celu")
def _celu(node, ins):
    return F.celu(ins[0], node.attrs.get("alpha", 1.0))


@converter("Selu")
def _selu(node, ins):
    a, g = node.attrs.get("alpha", 1.67326319217681884765625), node.attrs.get("gamma", 1.05070102214813232421875)
    x = ins[0]
    return g * torch.where(x > 0, x, a * (torch.exp(x) - 1))


@converter("ThresholdedRelu")
def _trelu(node, ins):
    x = ins[0]
    return torch.where(x > node.attrs.get("alpha", 1.0), x, torch.zeros_like(x))


@converter("HardSigmoid")
def _hsig(node, ins):
    return torch.clamp(node.attrs.get("alpha", 0.2) * ins[0] + node.attrs.get("beta", 0.5), 0, 1)


@converter("Shrink")
def _shrink(node, ins):
    x, lambd, bias = ins[0], node.attrs.get("lambd", 0.5), node.attrs.get("bias", 0.0)
    return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, torch.zeros_like(x)))


@converter("HardSwish")
def _hswish(node, ins):
    return F.hardswish(ins[0])


@converter("PRelu")
def _prelu(node, ins):
    x, slope = ins
    return torch.where(x >= 0, x, x * slope)


@converter("Gelu")
def _gelu(node, ins):
    return F.gelu(ins[0], approximate=node.attrs.get("approximate", "none"))


@converter("Clip")
def _clip(node, ins):
    x = ins[0]
    if node.opset < 11:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
    else:
        lo = ins[1] if len(ins) > 1 else None
        hi = ins[2] if len(ins) > 2 else None
    if lo is not None:
        x = torch.maximum(x, lo.to(x.dtype)) if isinstance(lo, torch.Tensor) else torch.clamp(x, min=lo)
    if hi is not None:
        x = torch.minimum(x, hi.to(x.dtype)) if isinstance(hi, torch.Tensor) else torch.clamp(x, max=hi)
    return x


def _int_div(a, b):
    return torch.div(a, b, rounding_mode="trunc")


_BINARY = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul,
    "Equal": torch.eq, "Less": torch.lt, "LessOrEqual": torch.le, "Greater": torch.gt,
    "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or, "Xor": torch.logical_xor,
    "BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or, "BitwiseXor": torch.bitwise_xor,
}
for _name, _fn in _BINARY.items():
    converter(_name)(lambda node, ins, _fn=_fn: _fn(ins[0], ins[1]))


@converter("Div")
def _div(node, ins):
    a, b = ins
    if a.dtype.is_floating_point:
        return a / b
    return _int_div(a, b)


@converter("Pow")
def _pow(node, ins):
    a, b = ins
    out = torch.pow(a, b)
    return out.to(a.dtype) if out.dtype != a.dtype else out


@converter("Mod")
def _mod(node, ins):
    a, b = ins
    return torch.fmod(a, b) if node.attrs.get("fmod", 0) else torch.remainder(a, b)


@converter("Sum", "Max", "Min", "Mean")
def _variadic(node, ins):
    fn = {"Sum": torch.add, "Max": torch.maximum, "Min": torch.minimum, "Mean": torch.add}[node.op_type]
    out = ins[0]
    for t in ins[1:]:
        out = fn(out, t)
    return out / len(ins) if node.op_type == "Mean" else out


@converter("Where")
def _where(node, ins):
    return torch.where(ins[0], ins[1], ins[2])


@converter("MatMul")
def _matmul(node, ins):
    return torch.matmul(ins[0], ins[1])


@converter("Gemm")
def _gemm(node, ins):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if node.attrs.get("transA", 0):
        a = a.transpose(0, 1)
    if node.attrs.get("transB", 0):
        b = b.transpose(0, 1)
    alpha, beta = node.attrs.get("alpha", 1.0), node.attrs.get("beta", 1.0)
    y = torch.matmul(a, b)
    if alpha != 1.0:
        y = alpha * y
    if c is not None:
        y = y + (c if beta == 1.0 else beta * c)
    return y


@converter("Einsum")
def _einsum(node, ins):
    return torch.einsum(node.attrs["equation"].replace(" ", ""), *ins)


def _flat2d_softmax(fn, x, axis):
    # opset < 13: coerce to 2-D [prod(shape[:axis]), prod(shape[axis:])], normalise along dim 1
    shape = x.shape
    return fn(x.reshape(math.prod(shape[:axis]), -1), dim=1).reshape(shape)


@converter("Softmax", "LogSoftmax")
def _softmax(node, ins):
    x = ins[0]
    fn = torch.softmax if node.op_type == "Softmax" else torch.log_softmax
    if node.opset < 13:
        return _flat2d_softmax(fn, x, norm_axis(node.attrs.get("axis", 1), x.dim()))
    return fn(x, dim=node.attrs.get("axis", -1))


def _reduce_axes(node, ins, x):
    """Axes of a Reduce* node (attribute before opset 18 — 13 for ReduceSum — input after), or None = all."""
    from_input = node.opset >= (13 if node.op_type == "ReduceSum" else 18)
    axes = ints(ins[1]) if from_input and len(ins) > 1 and ins[1] is not None else (
        [] if from_input else list(node.attrs.get("axes", [])))
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            return []
        return list(range(x.dim()))
    return sorted(norm_axis(a, x.dim()) for a in axes)


@converter("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
def _reduce(node, ins):
    x = ins[0]
    axes = _reduce_axes(node, ins, x)
    keep = bool(node.attrs.get("keepdims", 1))
    if not axes:
        return x
    t = node.op_type
    if t == "ReduceSum":
        return torch.sum(x, dim=axes, keepdim=keep)
    if t == "ReduceMean":
        return torch.mean(x, dim=axes, keepdim=keep)
    if t in ("ReduceMax", "ReduceMin"):
        return torch.amax(x, dim=axes, keepdim=keep) if t == "ReduceMax" else torch.amin(x, dim=axes, keepdim=keep)
    if t == "ReduceProd":
        out = x
        for a in reversed(axes):
            out = torch.prod(out, dim=a, keepdim=keep)
        return out
    if t == "ReduceL1":
        return torch.sum(torch.abs(x), dim=axes, keepdim=keep)
    if t == "ReduceL2":
        return torch.sqrt(torch.sum(x * x, dim=axes, keepdim=keep))
    if t == "ReduceSumSquare":
        return torch.sum(x * x, dim=axes, keepdim=keep)
    if t == "ReduceLogSum":
        return torch.log(torch.sum(x, dim=axes, keepdim=keep))
    return torch.logsumexp(x, dim=axes, keepdim=keep)


@converter("ArgMax", "ArgMin")
def _argmax(node, ins):
    x = ins[0]
    axis = norm_axis(node.attrs.get("axis", 0), x.dim())
    keep = bool(node.attrs.get("keepdims", 1))
    if node.attrs.get("select_last_index", 0):
        flipped = torch.flip(x, [axis])
        idx = (torch.argmax if node.op_type == "ArgMax" else torch.argmin)(flipped, dim=axis, keepdim=keep)
        return x.shape[axis] - 1 - idx
    return (torch.argmax if node.op_type == "ArgMax" else torch.argmin)(x, dim=axis, keepdim=keep)


@converter("CumSum")
def _cumsum(node, ins):
    x, axis = ins[0], norm_axis(ints(ins[1])[0], ins[0].dim())
    if node.attrs.get("reverse", 0):
        x = torch.flip(x, [axis])
    out = torch.cumsum(x, dim=axis)
    if node.attrs.get("exclusive", 0):
        out = out - x
    if node.attrs.get("reverse", 0):
        out = torch.flip(out, [axis])
    return out

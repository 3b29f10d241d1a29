"""Which ops can send their weight gradient as sufficient factors, and how they multiply by the weight.

The one SFB eligibility rule, read by the simulator (`tag.sim.sfb`), the selection (`tag.compression`) and
the deploy runtime (`tag.deploy.sfb`), so a plan that chooses an op can always be run. It is a property of the
op graph alone: for Y = X W the weight gradient is X^T dY, a product of per-row factors.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from tag.lru import Recent

SFB_OP_TYPES = ("Gemm", "MatMul", "Gather")  # what `tag.deploy.sfb` can run


@dataclass(frozen=True)
class SfbForm:
    """How an op multiplies by its 2-D parameter W, as the SFB path (here and `tag.deploy.sfb`) runs it.

    weight: the root parameter W; side: "right" for Y = X M (M is K x N, X rows of K), "left" for
    Y = M X (M is N x K, X columns of K); trans: M = W^T (Gemm transB, or W reaches the op through a
    2-D Transpose, as torch exports Linear); generator: index of that Transpose op, else None;
    x_input: which op input is the batched operand X."""

    weight: str
    side: str
    trans: bool
    generator: int | None
    x_input: int


_USERS: Recent = Recent(16)  # id(graph) -> (weak reference to it, its users)


def _param_users(graph) -> dict[str, set[int]]:
    """tensor name -> indices of the ops that read it (as an input or in Op.params), cached per graph object."""
    hit = _USERS.get(id(graph))
    if hit is not None and hit[0]() is graph:
        return hit[1]
    users: dict[str, set[int]] = {}
    for i, o in enumerate(graph.ops):
        for name in set(o.inputs) | set(o.params):
            users.setdefault(name, set()).add(i)
    _USERS.put(id(graph), (weakref.ref(graph), users))
    return users


def _weight_source(graph, name: str):
    """(root 2-D parameter, transposed?, Transpose op index or None) behind tensor `name`, or None.

    A root parameter stands for itself; a parameter made by a Transpose (perm [1, 0]) of a 2-D root
    parameter, read by one op only, stands for that root transposed."""
    t = graph.tensors.get(name)
    if t is None or t.role != "param" or t.shape is None or len(t.shape) != 2:
        return None
    if t.producer is None:
        return name, False, None
    gen = graph.ops[t.producer]
    if gen.op_type != "Transpose" or len(gen.inputs) != 1 or list(gen.attrs.get("perm", [1, 0])) != [1, 0]:
        return None
    src = graph.tensors.get(gen.inputs[0])
    if src is None or src.role != "param" or src.producer is not None or src.shape is None or len(src.shape) != 2:
        return None
    return gen.inputs[0], True, t.producer


def sfb_form(graph, op_index: int, group_ops=None) -> SfbForm | None:
    """The `SfbForm` of op `op_index` of an OpGraph if its weight gradient is a product of per-row factors
    that the SFB path can run, else None (`group_ops`: the op's group; a Transpose must be in it).

    Eligible: Gemm without transA whose second input is W or Transpose(W); MatMul with W or Transpose(W)
    on one side and a batched operand on the other (right: X [..., K] with the batch axis not last;
    left: X [..., K, S] with the batch axis before the last two). W is a 2-D parameter that no other op
    reads (so not tied, not shared); X and Y have batch axes and known shapes.

    >>> # Linear exported by torch: Transpose(W) -> MatMul(X, W^T)  ->  SfbForm(W, "right", True, t, 0)
    """
    op = graph.ops[op_index]
    if op.op_type not in SFB_OP_TYPES or len(op.inputs) < 2 or not op.outputs:
        return None
    if op.op_type == "Gemm" and int(op.attrs.get("transA", 0)):
        return None
    if op.inputs[0] == op.inputs[1]:
        return None
    if op.op_type == "Gather":
        return _gather_form(graph, op_index)
    sides = [(1, "right")] if op.op_type == "Gemm" else [(1, "right"), (0, "left")]
    for w_in, side in sides:
        src = _weight_source(graph, op.inputs[w_in])
        if src is None:
            continue
        root, trans, gen = src
        x_in = 1 - w_in
        x, y = graph.tensors.get(op.inputs[x_in]), graph.tensors.get(op.outputs[0])
        if x is None or y is None or x.role == "param" or x.shape is None or y.shape is None:
            return None
        if x.batch_axis is None or y.batch_axis is None:
            return None
        nd = len(x.shape)
        if (side == "right" and (nd < 2 or x.batch_axis >= nd - 1)) or \
                (side == "left" and (nd < 3 or x.batch_axis >= nd - 2)):
            return None
        users = _param_users(graph)
        allowed = {op_index} | ({gen} if gen is not None else set())
        if not users.get(root, set()) <= allowed:
            return None
        if gen is not None:
            if users.get(op.inputs[w_in], set()) != {op_index}:
                return None
            if group_ops is not None and gen not in group_ops:
                return None
        if op.op_type == "Gemm" and int(op.attrs.get("transB", 0)):
            trans = not trans
        return SfbForm(root, side, trans, gen, x_in)
    return None


def _gather_form(graph, op_index: int) -> SfbForm | None:
    """An embedding lookup Y = W[idx] (Gather on axis 0 of a 2-D root parameter no other op reads, with
    batched integer indices): dW is the scatter-add of dY's rows at idx, so (idx, dY) are its factors."""
    op = graph.ops[op_index]
    w, idx, y = (graph.tensors.get(op.inputs[0]), graph.tensors.get(op.inputs[1]), graph.tensors.get(op.outputs[0]))
    if w is None or idx is None or y is None or w.role != "param" or w.producer is not None:
        return None
    if w.shape is None or len(w.shape) != 2 or int(op.attrs.get("axis", 0)) not in (0, -2):
        return None
    if idx.dtype not in ("int64", "int32") or idx.shape is None or y.shape is None:
        return None
    if idx.batch_axis is None or y.batch_axis is None:
        return None
    if not _param_users(graph).get(op.inputs[0], set()) <= {op_index}:
        return None
    return SfbForm(op.inputs[0], "gather", False, None, 1)

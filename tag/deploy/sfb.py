"""Sufficient-factor broadcasting for products with a 2-D parameter W (Gemm, MatMul, Linear as Transpose->MatMul)
and for embedding lookups (Gather).

The op computes Y = alpha X M (side "right") or Y = M X (side "left"), M = W or W^T (`SFBOp.trans`: Gemm
transB, or W reached the op through a Transpose generator; that Transpose still runs in the group but its
output is not used, the product reads W itself). Forward runs the product through `_SFBMatMul`, whose
backward returns dX as usual but leaves dW to the sync phase: it stores two factor matrices P (rows x
M.rows) and Q (rows x M.cols) with dM = P^T Q:

* right: P = X rows (X reshaped to [-1, K]), Q = alpha dY rows ([-1, N]); 3-D activations [b, s, K]
  give s factor rows per batch row;
* left: P = dY columns (dY^T reshaped to [-1, N]), Q = X columns (X^T reshaped to [-1, K]).

An embedding Gather Y = W[idx] (side "gather") runs through `_SFBGather`: backward stores the flat
indices and dY rows, and dW is their scatter-add (index_add) into a zeroed table.

`sfb_weight_grad` all-gathers P and Q (or the indices and dY rows) over the group's replicas (in rank
order) and forms dM = P_all^T Q_all on every replica, identically (dW = dM^T when trans); this replaces the
all-reduce of dW (Zhang et al. 2017, Poseidon; TAG § SFB).
"""

from __future__ import annotations

import torch


def _mat(w: torch.Tensor, trans: bool) -> torch.Tensor:
    return w.t() if trans else w


class _SFBMatMul(torch.autograd.Function):
    """Y = alpha x @ M (right) or M @ x (left), M = op(W); backward stores the factors (P, Q) in `store`."""

    @staticmethod
    def forward(ctx, x, w, trans: bool, alpha: float, store: list, side: str):
        ctx.save_for_backward(x, w)
        ctx.trans, ctx.alpha, ctx.store, ctx.side = trans, alpha, store, side
        m = _mat(w, trans)
        return alpha * (x @ m) if side == "right" else m @ x

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        m = _mat(w, ctx.trans)
        if ctx.side == "right":
            dx = ctx.alpha * (dy @ m.t())
            p, q = x.detach().reshape(-1, x.shape[-1]), (ctx.alpha * dy).detach().reshape(-1, dy.shape[-1])
        else:
            dx = m.t() @ dy
            p = dy.detach().transpose(-1, -2).reshape(-1, dy.shape[-2])
            q = x.detach().transpose(-1, -2).reshape(-1, x.shape[-2])
        ctx.store.append((p, q))
        return dx, None, None, None, None, None


class _SFBGather(torch.autograd.Function):
    """Y = W[idx] (rows of the table W); backward stores (idx flat, dY rows) in `store`, no gradient to W."""

    @staticmethod
    def forward(ctx, idx, w, store: list):
        ctx.store = store
        ctx.idx = idx
        return w.index_select(0, idx.reshape(-1)).reshape(tuple(idx.shape) + (w.shape[1],))

    @staticmethod
    def backward(ctx, dy):
        ctx.store.append((ctx.idx.reshape(-1, 1), dy.detach().reshape(-1, dy.shape[-1])))
        return None, None, None


def _value(name: str, env: dict, program) -> torch.Tensor:
    v = env.get(name)
    return program.param(name) if v is None else v


def sfb_forward(op, env: dict, program, store: list, sfb_op=None) -> dict:
    """Run Gemm/MatMul `op` (an `Op`) on `env` with its weight gradient deferred to SFB; returns env.

    sfb_op: the schedule's `SFBOp` (weight, side, trans); without it, W is the op's second input, right side."""
    side = sfb_op.side if sfb_op is not None else "right"
    x_in = sfb_op.x_input if sfb_op is not None else 0
    x = env[op.inputs[x_in]]
    w = program.param(sfb_op.param) if sfb_op is not None else _value(op.inputs[1], env, program)
    if side == "gather":
        idx = x.to(torch.int64)
        idx = torch.where(idx < 0, idx + w.shape[0], idx)  # ONNX Gather counts negative indices from the end
        env[op.outputs[0]] = _SFBGather.apply(idx, w, store)
        return env
    if w.dim() != 2:
        raise RuntimeError(f"SFB op {op.name!r}: weight must be 2-D, has shape {tuple(w.shape)}")
    trans = sfb_op.trans if sfb_op is not None else bool(op.op_type == "Gemm" and int(op.attrs.get("transB", 0)))
    if op.op_type == "Gemm":
        alpha, beta = float(op.attrs.get("alpha", 1.0)), float(op.attrs.get("beta", 1.0))
        y = _SFBMatMul.apply(x, w, trans, alpha, store, "right")
        if len(op.inputs) > 2 and op.inputs[2]:
            y = y + beta * _value(op.inputs[2], env, program)
    else:
        y = _SFBMatMul.apply(x, w, trans, 1.0, store, side)
    env[op.outputs[0]] = y
    return env


def sfb_weight_grad(sfb_op, op, store: list, schedule, comm, w: torch.Tensor) -> torch.Tensor:
    """dW of `sfb_op` from the factors of every replica: P_all^T Q_all (transposed when W enters as W^T), or
    for an embedding the scatter-add of every replica's dY rows at its indices."""
    gather = sfb_op.side == "gather"
    m_rows, m_cols = (w.shape[1], w.shape[0]) if sfb_op.trans else tuple(w.shape)
    if gather:
        m_rows = 1
    if store:
        p = torch.cat([s[0] for s in store], dim=0)
        q = torch.cat([s[1] for s in store], dim=0)
    else:  # the op's output did not reach the loss on this rank
        p = torch.zeros((0, m_rows), dtype=torch.int64 if gather else w.dtype, device=w.device)
        q = w.new_zeros((0, m_cols))
    rows = schedule.rank_rows[sfb_op.group]
    my_rows = rows[comm.rank]
    per_row = _per_row(comm, p.shape[0], my_rows, sfb_op.ranks)
    counts = [rows[r] * per_row for r in sfb_op.ranks]
    p_all = comm.all_gather_rows(p, counts, sfb_op.ranks)
    q_all = comm.all_gather_rows(q, counts, sfb_op.ranks)
    if gather:
        return torch.zeros_like(w).index_add_(0, p_all.reshape(-1), q_all)
    dm = p_all.t() @ q_all  # M.rows x M.cols
    return dm.t().contiguous() if sfb_op.trans else dm


def _per_row(comm, n: int, rows: int, ranks) -> int:
    """Factor rows per batch row, agreed over the replicas (a rank without factors learns it from the others)."""
    import torch.distributed as dist

    t = torch.tensor([n // rows if rows and n else 0], dtype=torch.int64, device=comm.device)
    if len(ranks) > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=comm.group(ranks))
    return int(t.item())

"""Sufficient-factor broadcasting for Y = X W (Gemm or MatMul with parameter W).

Forward runs the product through `_SFBMatMul`, whose backward returns dX = dY W^T as usual but leaves
dW to the sync phase: it stores the factors X (rows x K) and alpha * dY (rows x N). `sfb_weight_grad`
all-gathers both over the group's replicas (in rank order) and forms dW = X_all^T dY_all (or its
transpose when W is stored transposed, Gemm transB=1) on every replica, identically; this replaces the
all-reduce of dW (Zhang et al. 2017, Poseidon; TAG § SFB).
"""

from __future__ import annotations

import torch


class _SFBMatMul(torch.autograd.Function):
    """Y = alpha * X @ op(W) with op = transpose if trans_b; backward stores (X, alpha dY) in `store`."""

    @staticmethod
    def forward(ctx, x, w, trans_b: bool, alpha: float, store: list):
        ctx.save_for_backward(x, w)
        ctx.trans_b, ctx.alpha, ctx.store = trans_b, alpha, store
        return alpha * (x @ (w.t() if trans_b else w))

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        wm = w.t() if ctx.trans_b else w
        dx = ctx.alpha * (dy @ wm.t())
        ctx.store.append((x.detach().reshape(-1, x.shape[-1]), (ctx.alpha * dy).detach().reshape(-1, dy.shape[-1])))
        return dx, None, None, None, None


def sfb_forward(op, env: dict, program, store: list) -> dict:
    """Run Gemm/MatMul `op` (an `Op`) on `env` with its weight gradient deferred to SFB; returns env."""
    x = env[op.inputs[0]]
    w = env.get(op.inputs[1])
    if w is None:
        w = program.param(op.inputs[1])
    if w.dim() != 2:
        raise RuntimeError(f"SFB op {op.name!r}: weight must be 2-D, has shape {tuple(w.shape)}")
    if op.op_type == "Gemm":
        trans_b = bool(int(op.attrs.get("transB", 0)))
        alpha, beta = float(op.attrs.get("alpha", 1.0)), float(op.attrs.get("beta", 1.0))
        y = _SFBMatMul.apply(x, w, trans_b, alpha, store)
        if len(op.inputs) > 2 and op.inputs[2]:
            c = env.get(op.inputs[2])
            if c is None:
                c = program.param(op.inputs[2])
            y = y + beta * c
    else:
        y = _SFBMatMul.apply(x, w, False, 1.0, store)
    env[op.outputs[0]] = y
    return env


def sfb_weight_grad(sfb_op, op, store: list, schedule, comm, w: torch.Tensor) -> torch.Tensor:
    """dW of `sfb_op` from the factors of every replica: X_all^T dY_all (transposed for Gemm transB=1)."""
    k, n_out = (w.shape[1], w.shape[0]) if (op.op_type == "Gemm" and int(op.attrs.get("transB", 0))) else w.shape
    if store:
        x = torch.cat([s[0] for s in store], dim=0)
        dy = torch.cat([s[1] for s in store], dim=0)
    else:  # the op's output did not reach the loss on this rank
        x = w.new_zeros((0, k))
        dy = w.new_zeros((0, n_out))
    rows = schedule.rank_rows[sfb_op.group]
    my_rows = rows[comm.rank]
    per_row = _per_row(comm, x.shape[0], my_rows, sfb_op.ranks)
    counts = [rows[r] * per_row for r in sfb_op.ranks]
    x_all = comm.all_gather_rows(x, counts, sfb_op.ranks)
    dy_all = comm.all_gather_rows(dy, counts, sfb_op.ranks)
    dw = x_all.t() @ dy_all  # K x N
    return dw.t().contiguous() if (op.op_type == "Gemm" and int(op.attrs.get("transB", 0))) else dw


def _per_row(comm, n: int, rows: int, ranks) -> int:
    """Factor rows per batch row, agreed over the replicas (a rank without factors learns it from the others)."""
    import torch.distributed as dist

    t = torch.tensor([n // rows if rows and n else 0], dtype=torch.int64, device=comm.device)
    if len(ranks) > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=comm.group(ranks))
    return int(t.item())

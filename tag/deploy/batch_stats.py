"""An autograd-aware sum over a set of ranks, for batch statistics that span ranks (training-mode BatchNormalization).

If every rank r computes s_r from its rows and uses S = sum_r s_r, then dL/ds_r = sum over ranks of dL_r'/dS:
the backward of the sum is the same sum of the incoming gradients. Both directions are one all-reduce over the
ranks' process group, so the ranks' gradients match one device's on the whole batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class _GroupSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, group):
        ctx.group = group
        out = t.detach().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out = grad.contiguous().clone()
        dist.all_reduce(out, group=ctx.group)
        return out, None


def group_sum(group):
    """A function t -> the sum of t over the ranks of `group` (every member must call it, in the same order)."""
    return lambda t: _GroupSum.apply(t, group)

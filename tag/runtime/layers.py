"""Batch normalisation and dropout of a user module, made to train like one device on the global batch.

`prepare_module` swaps, in place, every ``torch.nn.BatchNorm1d/2d/3d`` for `GlobalBatchNorm` and every
``torch.nn.Dropout`` for `GlobalDropout`, keeping the parameter and buffer names (``1.weight``, ``1.running_mean``):

- `GlobalBatchNorm` in training normalises with the mean and biased variance of the global batch per channel,
  the sums added over the replicas by the plan's `stats_sum` (autograd-aware, `tag.deploy.batch_stats`), and
  updates its running statistics as torch does: running = (1 - momentum) running + momentum batch, the variance
  unbiased (x n / (n - 1), n = global rows x spatial size). In eval mode it is torch's inference batch norm.
- `GlobalDropout` keeps an element when u >= p, u drawn for the whole global batch (rows on dim 0) by a generator
  seeded `tag.deploy.onnx_torch.ops_nn.dropout_seed(seed, step, k)` (k: the layer's position among the module's
  dropout layers) and cut to this rank's rows; kept elements are scaled by 1 / (1 - p).

Both read the `TrainingContext` the trainer sets for each step (`tag.deploy.onnx_torch.ops_nn.training_context`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tag.deploy.onnx_torch.ops_nn import _CONTEXT, dropout_seed


class GlobalBatchNorm(torch.nn.Module):
    """A torch BatchNorm layer whose training statistics are the global batch's (see the module docstring)."""

    def __init__(self, bn: torch.nn.modules.batchnorm._BatchNorm):
        super().__init__()
        self.eps, self.momentum, self.affine = bn.eps, bn.momentum, bn.affine
        self.weight, self.bias = bn.weight, bn.bias  # the same Parameter objects: optimizer and names unchanged
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            self.register_buffer(name, getattr(bn, name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        ctx = _CONTEXT.get()
        total = ctx.stats_sum if ctx.stats_sum is not None else (lambda t: t)
        dims = [0] + list(range(2, x.dim()))
        c = x.shape[1]
        first = total(torch.cat([x.sum(dim=dims), x.new_tensor([x.numel() // c])]))
        n = first[c]
        mean = first[:c] / n
        shape = (1, c) + (1,) * (x.dim() - 2)
        centred = x - mean.reshape(shape)
        var = total((centred * centred).sum(dim=dims)) / n
        y = centred * torch.rsqrt(var.reshape(shape) + self.eps)
        if self.affine:
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        if self.running_mean is not None:
            m = self.momentum if self.momentum is not None else 0.1
            with torch.no_grad():
                self.num_batches_tracked += 1
                self.running_mean.mul_(1 - m).add_(mean.detach() * m)
                self.running_var.mul_(1 - m).add_(var.detach() * (n / (n - 1)).detach() * m)
        return y


class GlobalDropout(torch.nn.Module):
    """Dropout with the masks of one device on the global batch (see the module docstring)."""

    def __init__(self, p: float, index: int):
        super().__init__()
        self.p, self.index = float(p), int(index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p >= 1.0:
            return torch.zeros_like(x)
        ctx = _CONTEXT.get()
        rows = x.shape[0]
        full = (ctx.global_rows if ctx.global_rows is not None else rows,) + tuple(x.shape[1:])
        gen = torch.Generator().manual_seed(dropout_seed(ctx.seed, ctx.step, self.index))
        keep = (torch.rand(full, generator=gen)[ctx.row_offset:ctx.row_offset + rows] >= self.p).to(x.device)
        return x * keep.to(x.dtype) / (1.0 - self.p)


def prepare_module(module: torch.nn.Module) -> torch.nn.Module:
    """Swap BatchNorm and Dropout layers of `module` in place (see the module docstring); returns `module`."""
    dropouts = 0

    def swap(parent: torch.nn.Module) -> None:
        nonlocal dropouts
        for name, child in parent.named_children():
            if isinstance(child, torch.nn.modules.batchnorm._BatchNorm) and not isinstance(child, GlobalBatchNorm):
                setattr(parent, name, GlobalBatchNorm(child))
            elif type(child) is torch.nn.Dropout:
                setattr(parent, name, GlobalDropout(child.p, dropouts))
                dropouts += 1
            else:
                swap(child)

    swap(module)
    return module

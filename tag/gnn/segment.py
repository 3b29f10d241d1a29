"""Segment reductions over an index vector: the message-passing primitives of `tag.gnn.layers` and the pooling of
`tag.gnn.model`, in plain torch (the same arithmetic as `torch_geometric.utils.scatter` / `softmax` on CPU, so the
shipped weights give the same outputs).

`index` [E] (int64) assigns each entry of `src` along one axis (rows by default) to one of `dim_size` segments
(graph nodes, graphs of a batch, decision points). A segment no entry maps to reduces to 0.

Example: scatter(tensor([1., 2., 4.]), tensor([0, 0, 2]), dim_size=3) -> tensor([3., 0., 4.]).
"""

from __future__ import annotations

import torch

REDUCES = ("sum", "mean", "max")


def _spread(index: torch.Tensor, like: torch.Tensor, dim: int) -> torch.Tensor:
    """`index` [E] laid along axis `dim` and expanded to the shape of `like` (whose axis `dim` has E entries)."""
    shape = [1] * like.dim()
    shape[dim] = -1
    return index.view(shape).expand_as(like)


def scatter(src: torch.Tensor, index: torch.Tensor, dim: int = 0, dim_size: int | None = None,
            reduce: str = "sum") -> torch.Tensor:
    """out[..., s, ...] = reduce over entries e of axis `dim` with index[e] = s of src[..., e, ...]; axis `dim` of
    the result has dim_size entries, the other axes are src's.

    sum: sum_e src[e]; mean: the sum over max(1, entries in s); max: the largest src[e] (elementwise), 0 for an
    empty segment. dim_size defaults to max(index) + 1 (0 for no entries).
    """
    if reduce not in REDUCES:
        raise ValueError(f"reduce must be one of {REDUCES}, got {reduce!r}")
    if index.dim() != 1:
        raise ValueError(f"index must be one-dimensional, got {index.dim()} dimensions")
    dim = dim + src.dim() if dim < 0 else dim
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    size = src.shape[:dim] + (dim_size,) + src.shape[dim + 1:]
    spread = _spread(index, src, dim)
    if reduce == "max":
        return src.new_zeros(size).scatter_reduce_(dim, spread, src, reduce="amax", include_self=False)
    out = src.new_zeros(size).scatter_add_(dim, spread, src)
    if reduce == "mean":
        count = src.new_zeros(dim_size).scatter_add_(0, index, src.new_ones(src.shape[dim])).clamp(min=1)
        out = out / _spread(count, out, dim)
    return out


def softmax(src: torch.Tensor, index: torch.Tensor, num_segments: int | None = None) -> torch.Tensor:
    """Softmax of src [E, ...] within each segment of `index`, along dim 0:

        out[e] = exp(src[e] - m[s]) / (sum_{e': index[e'] = s} exp(src[e'] - m[s]) + 1e-16),  s = index[e],

    m[s] = max of the segment (subtracted for range; no gradient flows through it). Same shape as src.
    `num_segments` defaults to max(index) + 1.
    """
    src_max = scatter(src.detach(), index, 0, num_segments, reduce="max")
    out = (src - src_max.index_select(0, index)).exp()
    out_sum = scatter(out, index, 0, num_segments, reduce="sum") + 1e-16
    return out / out_sum.index_select(0, index)

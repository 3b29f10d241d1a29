"""Row slices of batched tensors: how many entries along the batch axis one batch row owns.

tag.graph.batch_axis records, for every batched tensor, the axis that carries rows (`TensorInfo.batch_axis`)
and its shape at the file's batch (`TensorInfo.shape`, file batch F; F = 1 where the batch is symbolic). A row
owns k = shape[axis] // F consecutive entries of that axis: k = 1 for [B, S, d], k = S for the [B*S, d] the
exporters flatten to before each Gemm (batch outer: the batch axis pass marks a tensor whose rows interleave
with an outer dim as unsplittable, so a tensor that crosses op groups has rows as contiguous blocks of k).
Global rows [r, r + n) of a tensor holding rows from `first` on are therefore entries [(r - first) k,
(r - first + n) k) of its batch axis. The simulator's bytes use the same fact (`TensorInfo.bytes_per_row`:
numel x itemsize / F, i.e. k entries' worth per row); deploy cuts every tensor that crosses ranks with it.
"""

from __future__ import annotations

import torch

from tag.graph.opgraph import TensorInfo


def entries_per_row(info: TensorInfo, file_batch: int) -> int:
    """k: entries one batch row owns along `info`'s batch axis (shape[axis] // file_batch, at least 1)."""
    if info.batch_axis is None or info.shape is None:
        raise ValueError(f"tensor {info.name!r} has no batch axis and known shape; its rows cannot be sliced")
    return max(int(info.shape[info.batch_axis]) // max(int(file_batch), 1), 1)


def narrow_rows(x: torch.Tensor, info: TensorInfo, file_batch: int, first_row: int, rows: int) -> torch.Tensor:
    """Rows [first_row, first_row + rows) (counted from the first row `x` holds) of `x`, a tensor like `info`.

    Narrows the batch axis to entries [first_row k, (first_row + rows) k), k = `entries_per_row`.
    """
    k = entries_per_row(info, file_batch)
    return x.narrow(info.batch_axis, first_row * k, rows * k)

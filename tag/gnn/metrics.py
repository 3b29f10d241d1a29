"""Ranking and loss metrics for the GNN (plain numpy)."""

from __future__ import annotations

import numpy as np


def kendall_tau(x, y) -> float:
    """Kendall's tau-b between two score vectors (ties in either count as neither concordant nor discordant).

    >>> kendall_tau([1, 2, 3], [10, 20, 30])
    1.0
    >>> kendall_tau([1, 2, 3], [3, 2, 1])
    -1.0
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("kendall_tau needs two 1-D arrays of the same length")
    i, j = np.triu_indices(len(x), k=1)
    dx = np.sign(x[i] - x[j])
    dy = np.sign(y[i] - y[j])
    n_x = np.count_nonzero(dx)
    n_y = np.count_nonzero(dy)
    if n_x == 0 or n_y == 0:
        return float("nan")
    return float(np.sum(dx * dy) / np.sqrt(float(n_x) * float(n_y)))

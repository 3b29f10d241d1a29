"""DLRM-style recommender (Naumov et al. 2019) in plain torch.

dense (batch, 13) float -> bottom MLP; sparse (batch, tables) int64, column t indexes table t; the bottom
output and the table rows are paired by dot products (strictly lower triangle), concatenated with the bottom
output and fed to the top MLP and a sigmoid. Returns (batch, 1) click probabilities.
"""

from __future__ import annotations

import torch
from torch import nn

from .export import register_int_constant


def mlp(sizes: tuple[int, ...], last_activation: bool = True) -> nn.Sequential:
    """Linear layers between consecutive sizes with ReLU after each (and after the last if asked)."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_activation or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """DLRM with dot interaction over 1 + tables feature vectors of width dim."""

    def __init__(self, dense: int = 13, tables: int = 8, rows: int = 1_000_000, dim: int = 64,
                 bottom: tuple[int, ...] = (512, 256), top: tuple[int, ...] = (512, 256)):
        super().__init__()
        self.bottom = mlp((dense,) + bottom + (dim,))
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(tables))
        features = tables + 1
        pairs = [(i, j) for i in range(features) for j in range(i)]
        register_int_constant(self, "pair_index", [i * features + j for i, j in pairs])
        self.top = mlp((dim + len(pairs),) + top + (1,), last_activation=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        vectors = [x] + [table(sparse[:, t]) for t, table in enumerate(self.tables)]
        z = torch.stack(vectors, dim=1)
        dots = torch.bmm(z, z.transpose(1, 2)).flatten(1)
        interaction = torch.index_select(dots, 1, self.pair_index)
        return torch.sigmoid(self.top(torch.cat([x, interaction], dim=1)))


def dlrm() -> nn.Module:
    """DLRM: 13 dense features, bottom 512-256-64, 8 tables x 1,000,000 rows x 64, top 512-256-1."""
    return DLRM()


def dlrm_tiny() -> nn.Module:
    """DLRM at CI size: 13 dense, bottom 32-16, 4 tables x 1,000 rows x 16, top 32-1."""
    return DLRM(tables=4, rows=1000, dim=16, bottom=(32,), top=(32,))

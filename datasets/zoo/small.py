"""Small fully connected models for fast tests and CPU fidelity runs."""

from __future__ import annotations

from torch import nn


def mlp() -> nn.Module:
    """Three Linear layers 512 wide with ReLU between them: 512 -> 512 -> 512 -> 512."""
    return nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))


def fc_wide() -> nn.Module:
    """Two wide Linear layers 2048 -> 4096 -> 4096 with a ReLU between (large weight gradients, where
    sufficient-factor broadcasting pays)."""
    return nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 4096))

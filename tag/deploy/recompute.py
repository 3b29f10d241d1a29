"""Activation recomputation of one group (a decision's ``recompute``): ``torch.utils.checkpoint`` around its ops.

The forward keeps only the group's inputs (activations received or handed over, data rows, weights); before the
group's backward, autograd runs its ops again on them and back-propagates through that second run (non-reentrant
checkpoint, which also restores the RNG state, so dropout masks repeat). `run` must set up everything the ops read
from the surroundings itself (training context, autocast), because the second run happens inside the backward.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint


def run_recomputed(run: Callable[[dict], dict], env: dict, outputs: list[str]) -> dict:
    """`run(env)` under checkpointing: env plus `outputs` (the only values kept from the run)."""
    names = [k for k, v in env.items() if isinstance(v, torch.Tensor)]

    def forward(*tensors):
        out = run({**env, **dict(zip(names, tensors))})
        return tuple(out[t] for t in outputs)

    values = checkpoint(forward, *[env[k] for k in names], use_reentrant=False)
    return {**env, **dict(zip(outputs, values))}

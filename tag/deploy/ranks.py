"""Which rank hosts each plan device: `tag deploy --nproc N` maps the plan's devices onto N ranks in contiguous
blocks of topology order (the deploy schedule and the pipeline schedule both use it)."""

from __future__ import annotations


def device_ranks(n_devices: int, nproc: int) -> list[int]:
    """Rank of each plan device: contiguous blocks in topology order, block sizes differing by at most one.

    >>> device_ranks(4, 2)
    [0, 0, 1, 1]
    >>> device_ranks(5, 2)
    [0, 0, 0, 1, 1]
    """
    if not 1 <= nproc <= n_devices:
        raise ValueError(f"nproc must be in 1..{n_devices}, got {nproc}")
    base, extra = divmod(n_devices, nproc)
    out: list[int] = []
    for r in range(nproc):
        out += [r] * (base + (1 if r < extra else 0))
    return out

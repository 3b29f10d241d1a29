"""Which dataset rows make each global batch, and which of them each rank reads.

Epoch e visits the dataset in the order of a permutation drawn from ``numpy.random.default_rng([seed, e])``;
global batch k of the epoch is the slice [k B, (k + 1) B) of that order (B = the plan's global batch). The
last N mod B rows of an epoch are **dropped** (``drop_last``): a plan's row map is fixed for B rows, and one
device training with batch B and drop_last sees exactly the same batches. Step s (counted over the whole run)
is batch s mod K of epoch s div K, K = N div B steps per epoch, so the data order of any step is a function of
(seed, N, B, s) only: a resumed run continues it without saved state.

A rank reads the contiguous rows [lo, hi) of every global batch that its groups compute (rows are laid out in
topology order, `tag.strategy.row_offsets`); `RankBatchSampler` yields those dataset indices per step and
can serve as a torch ``DataLoader``'s ``batch_sampler``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class EpochOrder:
    """The global batches of a dataset of `n_rows` rows at `batch_rows` rows per step, seeded by `seed`."""

    n_rows: int
    batch_rows: int
    seed: int = 0

    @property
    def steps_per_epoch(self) -> int:
        """K = N div B (the last partial batch is dropped)."""
        return self.n_rows // self.batch_rows

    def permutation(self, epoch: int) -> np.ndarray:
        """The order of the dataset's rows in `epoch` (a permutation of range(n_rows)), read-only: drawn once per
        (order, epoch) and shared by every step of the epoch and every caller (the rank's sampler, the ignored-label
        count)."""
        return _permutation(int(self.n_rows), int(self.seed), int(epoch))

    def batch(self, step: int) -> np.ndarray:
        """Dataset indices of the global batch of run step `step`, in row order (B of them)."""
        epoch, k = divmod(int(step), self.steps_per_epoch)
        return self.permutation(epoch)[k * self.batch_rows:(k + 1) * self.batch_rows]

    def epoch_of(self, step: int) -> int:
        return int(step) // self.steps_per_epoch


@lru_cache(maxsize=4)
def _permutation(n_rows: int, seed: int, epoch: int) -> np.ndarray:
    order = np.random.default_rng([seed, epoch]).permutation(n_rows)
    order.flags.writeable = False
    return order


@dataclass(frozen=True)
class RankBatchSampler:
    """Per step from `start_step` to `stop_step`: the dataset indices of rows [lo, hi) of the global batch.

    >>> s = RankBatchSampler(EpochOrder(10, 4, seed=0), lo=1, hi=3, stop_step=2)
    >>> [len(b) for b in s]
    [2, 2]
    """

    order: EpochOrder
    lo: int
    hi: int
    stop_step: int
    start_step: int = 0

    def rows(self, step: int) -> list[int]:
        return [int(i) for i in self.order.batch(step)[self.lo:self.hi]]

    def __iter__(self):
        for step in range(self.start_step, self.stop_step):
            yield self.rows(step)

    def __len__(self) -> int:
        return max(0, self.stop_step - self.start_step)


def rank_span(offsets_rows: list[tuple[int, int]]) -> tuple[int, int]:
    """[lo, hi) covering every (offset, rows) slice with rows > 0; (0, 0) when there is none.

    >>> rank_span([(4, 2), (0, 0), (3, 1)])
    (3, 6)
    """
    used = [(o, o + n) for o, n in offsets_rows if n > 0]
    if not used:
        return 0, 0
    return min(a for a, _ in used), max(b for _, b in used)

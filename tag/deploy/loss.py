"""Training losses of deploy: each rank's share of the global-batch mean, so the ranks' terms add up.

For a global batch of B rows and per-row losses l_i, the loss is L = (1/B) sum_i l_i. A rank holding rows
[off, off + n) contributes T = (1/B) sum_{i in its rows} l_i, so sum over ranks of T = L and the gradients
of the terms add up to the full-batch gradient (every sync method sums). Per-row losses:

- ``mse``: mean over the row's elements of (y - t)^2 (the synthetic-data loss; there the sum runs over every
  float output with a target);
- ``cross_entropy``: -log softmax(y)[t] with y = [rows, C] logits and t = [rows] integer classes in [0, C); for
  y = [rows, P1, ..., Pk, C] (a sequence model's logits, classes last) and t = [rows, P1, ..., Pk], the mean over
  the row's P1 x ... x Pk positions of -log softmax(y[p])[t[p]] (token-level language modelling); y = [rows, C,
  P1, ..., Pk] (torch's convention, e.g. segmentation) likewise, the classes' axis told by t's shape
  (`class_axis`);
- ``nll``: -y[t] with y = [rows, C] log-probabilities (positions as for cross_entropy);
- ``bce``: mean over the row's elements of -(t log y + (1 - t) log(1 - y)), y probabilities in [0, 1];
- a callable ``fn(y_rows, t_rows) -> [rows]`` per-row losses (``module:function`` or ``file.py:function``).

Accuracy (classification losses only) counts rows whose argmax over classes equals the label
(cross_entropy, nll) or whose every element is on the label's side of 0.5 (bce). With positions, a row counts the
fraction of its positions whose argmax equals the label (so the accuracy is the token accuracy).

**Ignored labels** (cross_entropy, nll): a label of ``IGNORE_INDEX`` (-100, torch's and Hugging Face's padding
label) is no class. When a step's global batch holds any, the loss is torch's ``F.cross_entropy(ignore_index=-100)``
on the whole batch: L = (1/N) sum over the N counted positions (labels other than -100) of their losses, N counted
over the global batch (`IgnoredLabels.counted`; every rank knows it from the dataset's labels, no message). A rank
adds T = (1/N) sum over its rows' counted positions, so the ranks' terms add up to L again; with nothing ignored,
N = B x positions and T is the per-row form above. Accuracy is then the right counted positions over N, scaled to
rows (x B) so that the steps' sums over ranks divide by B as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # a class label that is no class (padding): torch's default ignore_index
LOSS_NAMES = ("mse", "cross_entropy", "nll", "bce")
CLASS_LABEL_LOSSES = ("cross_entropy", "nll")  # targets are integer class indices


@dataclass(frozen=True)
class Loss:
    """A named loss, or a user callable returning per-row losses (``name`` is then its spec)."""

    name: str
    fn: Callable | None = None

    @property
    def classifies(self) -> bool:
        """Does the loss have an accuracy (a classification loss)?"""
        return self.fn is None and self.name in CLASS_LABEL_LOSSES + ("bce",)

    def term(self, y: torch.Tensor, target: torch.Tensor, global_rows: int, rows: int | None,
             counted: int | None = None) -> torch.Tensor:
        """This rank's share of the global-batch loss: (1/global_rows) x sum of per-row losses of y's rows.

        rows: y's row count, or None for an output without a batch axis (then the term is the whole loss,
        which one rank of the group adds). For mse the division is by the target's element count over the
        global batch, the same number as (1/B) x per-row means. counted (class-label losses): the global batch's
        count of labels that are not IGNORE_INDEX when it has ignored ones (module docstring), else None.
        """
        if self.fn is not None:
            per_row = self.fn(y, target)
            if not isinstance(per_row, torch.Tensor) or tuple(per_row.shape) != (y.shape[0],):
                found = tuple(per_row.shape) if isinstance(per_row, torch.Tensor) else type(per_row).__name__
                raise ValueError(f"loss {self.name} returned {found}; expected per-row losses of shape ({y.shape[0]},)")
            return per_row.sum() / global_rows
        if self.name in ("mse", "bce"):
            numel = target.numel() if rows is None else target.numel() // max(rows, 1) * global_rows
            if self.name == "mse":
                return ((y - target) ** 2).sum() / numel
            return F.binary_cross_entropy(y, target, reduction="sum") / numel
        if self.name in CLASS_LABEL_LOSSES:
            per_position = (F.cross_entropy if self.name == "cross_entropy" else F.nll_loss)(
                y.movedim(class_axis(y.shape, target.shape), 1), target, reduction="none",
                ignore_index=IGNORE_INDEX)  # [rows, P1, ..., Pk], 0 at ignored positions
            if counted is not None:
                return per_position.sum() / max(counted, 1)  # a batch of ignored labels only: loss 0, no gradient
            return _row_means(per_position).sum() / global_rows
        raise ValueError(f"unknown loss {self.name!r}")

    def correct(self, y: torch.Tensor, target: torch.Tensor, counted: int | None = None,
                global_rows: int | None = None) -> float:
        """Rows of y classified right (see the module docstring; a row with positions counts the fraction of
        them right; with `counted`, the right counted positions x global_rows / counted); 0 for a loss that does
        not classify."""
        if not self.classifies:
            return 0.0
        with torch.no_grad():
            if self.name == "bce":
                ok = (y >= 0.5) == (target >= 0.5)
                return float(ok.reshape(ok.shape[0], -1).all(dim=1).sum())
            right = y.argmax(dim=class_axis(y.shape, target.shape)) == target
            if counted is not None:
                return float(right.sum()) * global_rows / max(counted, 1)  # ignored labels are never right
            return float(_row_means(right.to(torch.float64)).sum())


def class_axis(y_shape, target_shape) -> int:
    """The classes' axis of scores y for integer labels: the last when the labels have y's shape without it
    ([rows, P..., C] with [rows, P...]: a language model's logits), else axis 1 when they have y's shape without
    axis 1 ([rows, C, P...] with [rows, P...]: torch's convention, e.g. segmentation); the last when both fit.

    >>> class_axis((4, 7, 10), (4, 7)), class_axis((4, 10, 7), (4, 7)), class_axis((4, 10), (4,))
    (2, 1, 1)
    """
    y_shape, target_shape = tuple(y_shape), tuple(target_shape)
    if len(y_shape) <= 2 or target_shape == y_shape[:-1]:
        return len(y_shape) - 1
    if target_shape == y_shape[:1] + y_shape[2:]:
        return 1
    return len(y_shape) - 1


def _row_means(per_position: torch.Tensor) -> torch.Tensor:
    """[rows, P1, ..., Pk] -> [rows]: the mean over each row's positions (k = 0: the values themselves)."""
    return per_position.reshape(per_position.shape[0], -1).mean(dim=1) if per_position.dim() > 1 else per_position


@dataclass(frozen=True)
class IgnoredLabels:
    """The per-row count of labels that are not IGNORE_INDEX, for every row of a dataset (`count_labels`)."""

    per_row: np.ndarray  # [dataset rows] int64

    def counted(self, rows) -> int:
        """N: the counted labels of the dataset rows `rows` (a global batch's indices)."""
        return int(self.per_row[np.asarray(rows, dtype=np.int64)].sum())


def count_labels(labels: torch.Tensor) -> IgnoredLabels | None:
    """`IgnoredLabels` of integer labels [rows, P...] (or [rows]), or None when none is IGNORE_INDEX (then every
    loss takes the per-row form).

    >>> count_labels(torch.tensor([[1, -100], [2, 3]])).per_row.tolist(), count_labels(torch.tensor([1, 2]))
    ([1, 2], None)
    """
    keep = (labels != IGNORE_INDEX).reshape(labels.shape[0], -1)
    if bool(keep.all()):
        return None
    return IgnoredLabels(keep.sum(dim=1).numpy().astype(np.int64))


MSE = Loss("mse")

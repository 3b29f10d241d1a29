"""The data order and the loss shares, worked out independently: numpy's generator for the documented order,
torch's mean-reduced losses for the shares (the ranks' terms of any row split add up to the whole batch's loss)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tag.deploy.loss import Loss
from tag.deploy.sampler import EpochOrder, RankBatchSampler, rank_span


def test_global_batches_follow_the_seeded_permutation_and_drop_the_last_partial_batch():
    order = EpochOrder(n_rows=10, batch_rows=4, seed=5)
    assert order.steps_per_epoch == 2  # rows 8 and 9 of every epoch's order are dropped
    for epoch in range(3):
        perm = np.random.default_rng([5, epoch]).permutation(10)
        assert list(order.batch(2 * epoch)) == list(perm[0:4])
        assert list(order.batch(2 * epoch + 1)) == list(perm[4:8])
    assert list(order.batch(0)) != list(order.batch(2))  # a new order every epoch
    assert order.epoch_of(5) == 2


def test_rank_samplers_partition_every_global_batch_uneven_rows():
    order = EpochOrder(n_rows=23, batch_rows=7, seed=1)
    spans = [(0, 4), (4, 5), (5, 7)]  # rows 4 / 1 / 2 of each global batch
    samplers = [RankBatchSampler(order, lo, hi, stop_step=6, start_step=2) for lo, hi in spans]
    assert [len(s) for s in samplers] == [4, 4, 4]
    for step, parts in zip(range(2, 6), zip(*samplers)):
        assert [len(p) for p in parts] == [4, 1, 2]
        assert sum(parts, []) == list(order.batch(step))
    assert rank_span([(3, 0), (9, 2), (5, 1)]) == (5, 11) and rank_span([(0, 0)]) == (0, 0)


@pytest.mark.parametrize("name", ["mse", "cross_entropy", "nll", "bce", "callable"])
def test_rank_terms_add_up_to_the_whole_batch_loss(name):
    g = torch.Generator().manual_seed(0)
    B, C = 9, 4
    logits = torch.randn(B, C, generator=g)
    labels = torch.randint(0, C, (B,), generator=g)
    if name == "mse":
        y, t, whole = logits, torch.randn(B, C, generator=g), None
        whole = F.mse_loss(y, t)
    elif name == "cross_entropy":
        y, t = logits, labels
        whole = F.cross_entropy(y, t)
    elif name == "nll":
        y, t = F.log_softmax(logits, 1), labels
        whole = F.nll_loss(y, t)
    elif name == "bce":
        y, t = torch.sigmoid(logits), (torch.rand(B, C, generator=g) > 0.5).float()
        whole = F.binary_cross_entropy(y, t)
    else:
        y, t = logits, labels
        whole = (logits.logsumexp(1) - logits[torch.arange(B), labels]).mean()  # cross entropy by hand
    loss = Loss(name, (lambda yy, tt: F.cross_entropy(yy, tt, reduction="none")) if name == "callable" else None)
    parts = [(0, 5), (5, 1), (6, 3)]
    total = sum(loss.term(y[o:o + n], t[o:o + n], B, n) for o, n in parts)
    assert float(total) == pytest.approx(float(whole), rel=1e-6)
    if name in ("cross_entropy", "nll"):
        right = int((logits.argmax(1) == labels).sum())
        assert sum(loss.correct(y[o:o + n], t[o:o + n]) for o, n in parts) == right


@pytest.mark.parametrize("name", ["cross_entropy", "nll"])
@pytest.mark.parametrize("classes_first", [False, True])
def test_sequence_logits_take_the_mean_over_each_rows_positions(name, classes_first):
    """y [rows, T, C] with labels [rows, T] (a language model), or y [rows, C, T] (torch's convention): per-row
    loss = mean over the row's T positions of -log softmax(y[r, :, p])[t[r, p]], worked out by a loop over rows and
    positions in float64; the ranks' terms of an uneven row split add up to the batch mean of those; accuracy counts
    each row's fraction of positions right."""
    g = torch.Generator().manual_seed(1)
    B, T, C = 7, 5, 6
    logits = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    labels = torch.randint(0, C, (B, T), generator=g)
    y = logits if name == "cross_entropy" else F.log_softmax(logits, -1)
    if classes_first:
        y = y.transpose(1, 2).contiguous()  # [B, C, T]; the loop below still reads logits [B, T, C]
    by_hand, right = 0.0, 0.0
    for r in range(B):
        row = 0.0
        for p in range(T):
            z = [float(v) for v in logits[r, p]]
            row += -(z[int(labels[r, p])] - np.log(np.sum(np.exp(z))))
            right += (max(range(C), key=lambda c: z[c]) == int(labels[r, p])) / T
        by_hand += row / T / B
    loss = Loss(name)
    parts = [(0, 3), (3, 1), (4, 3)]
    assert float(sum(loss.term(y[o:o + n], labels[o:o + n], B, n) for o, n in parts)) == pytest.approx(by_hand, rel=1e-12)
    assert sum(loss.correct(y[o:o + n], labels[o:o + n]) for o, n in parts) == pytest.approx(right, rel=1e-12)
    assert 0 < right < B  # the random logits get some positions right, not all

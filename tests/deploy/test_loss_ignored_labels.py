"""Ignored labels (-100) in `tag.deploy.loss`: the ranks' terms over row slices add up to torch's
F.cross_entropy / F.nll_loss with ignore_index=-100 on the whole batch (value and gradient), for both class
layouts, and the accuracy is the counted positions right over the counted ones."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tag.deploy.loss import IGNORE_INDEX, Loss, count_labels

B, T, C = 6, 5, 7


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    t = torch.randint(0, C, (B, T), generator=g)
    t[0, :3] = IGNORE_INDEX
    t[2] = IGNORE_INDEX  # a row with nothing counted
    t[5, 4] = IGNORE_INDEX
    return y, t


@pytest.mark.parametrize("name, classes_last", [("cross_entropy", True), ("cross_entropy", False),
                                                ("nll", True), ("nll", False)])
def test_slices_add_up_to_torch_ignore_index(name, classes_last):
    y, t = _batch()
    if name == "nll":
        y = torch.log_softmax(y, dim=-1)
    y_in = y if classes_last else y.movedim(-1, 1).contiguous()  # [B, C, T]: torch's convention
    counted = count_labels(t).counted(range(B))
    assert counted == B * T - 3 - T - 1  # by hand
    leaf = y_in.clone().requires_grad_(True)
    loss = Loss(name)
    total = sum(loss.term(leaf[a:b], t[a:b], B, b - a, counted) for a, b in ((0, 1), (1, 4), (4, 6)))
    total.backward()
    ref_leaf = y.clone().requires_grad_(True)
    fn = F.cross_entropy if name == "cross_entropy" else F.nll_loss
    ref = fn(ref_leaf.reshape(-1, C), t.reshape(-1), ignore_index=-100)
    ref.backward()
    assert float(total.detach()) == pytest.approx(float(ref.detach()), rel=1e-12)
    grad = leaf.grad if classes_last else leaf.grad.movedim(1, -1)
    torch.testing.assert_close(grad, ref_leaf.grad, rtol=1e-12, atol=1e-15)


def test_accuracy_counts_only_counted_positions():
    y, t = _batch(1)
    counted = count_labels(t).counted(range(B))
    right = sum(Loss("cross_entropy").correct(y[a:b], t[a:b], counted, B) for a, b in ((0, 3), (3, 6)))
    keep = t != IGNORE_INDEX
    by_hand = float(((y.argmax(-1) == t) & keep).sum()) / float(keep.sum())
    assert right / B == pytest.approx(by_hand, rel=1e-12)  # the record divides the steps' sums by B


def test_nothing_ignored_keeps_the_per_row_form():
    y, t = _batch()
    t[t == IGNORE_INDEX] = 1
    assert count_labels(t) is None
    per_row = Loss("cross_entropy").term(y, t, B, B)
    assert float(per_row) == pytest.approx(float(F.cross_entropy(y.reshape(-1, C), t.reshape(-1))), rel=1e-12)


def test_counted_over_a_global_batch_of_dataset_rows():
    t = torch.tensor([[1, IGNORE_INDEX], [IGNORE_INDEX, IGNORE_INDEX], [3, 4], [0, IGNORE_INDEX]])
    ign = count_labels(t)
    assert ign.per_row.tolist() == [1, 0, 2, 1]
    assert ign.counted(np.array([3, 2])) == 3 and ign.counted([1]) == 0

"""The digits data for `tag deploy --data`: scikit-learn's `load_digits` (1,797 8x8 images, 10 classes).

Pixels are scaled from 0..16 to 0..1 (float32); labels are int64 classes 0-9. The split is fixed: a permutation
from numpy's generator seeded 0, the first 360 rows (20%) held out for testing, the other 1,437 for training.

    tag deploy plan.json digits_mlp.onnx --data examples/digits/digits.py:train_set --loss cross_entropy ...
"""

from __future__ import annotations

import numpy as np

TEST_ROWS = 360  # 20% of 1,797


def _split():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int64)
    return x[order], y[order]


def train_set():
    """(X [1437, 64] float32, y [1437] int64): the training rows."""
    x, y = _split()
    return x[TEST_ROWS:], y[TEST_ROWS:]


def test_set():
    """(X [360, 64] float32, y [360] int64): the held-out rows."""
    x, y = _split()
    return x[:TEST_ROWS], y[:TEST_ROWS]

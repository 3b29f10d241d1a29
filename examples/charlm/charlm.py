"""Character data for `tag deploy --data`: next-character prediction over real English text.

The text is the dataset descriptions scikit-learn ships (`sklearn/datasets/descr/*.rst`, read in name order and
joined by blank lines). Characters map to their code point below 128 and every other one to `?` (VOCAB = 128
classes). Windows of WINDOW + 1 characters start every STRIDE characters; a row is (the first WINDOW characters as
int64 ids, the last WINDOW as int64 labels): each position's label is the next character. The split is fixed: the
first 90 % of the windows train, the last 10 % (the text's end, never seen in training) test.

    tag deploy plan.json charlm.onnx --data examples/charlm/charlm.py:train_set --loss cross_entropy ...
"""

from __future__ import annotations

import glob
import os

import numpy as np

VOCAB = 128  # ASCII
WINDOW = 32  # characters a row sees (the model's sequence length)
STRIDE = 16  # characters between window starts
TRAIN_SHARE = 0.9


def text() -> str:
    """The corpus: scikit-learn's dataset descriptions, in file-name order."""
    import sklearn

    folder = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "descr")
    parts = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(folder, "*.rst")))]
    return "\n\n".join(parts)


def encode(s: str) -> np.ndarray:
    """[len(s)] int64 ids: the code point when below VOCAB, else ord('?')."""
    return np.array([ord(c) if ord(c) < VOCAB else ord("?") for c in s], dtype=np.int64)


def decode(ids) -> str:
    return "".join(chr(int(i)) for i in ids)


def _windows() -> tuple[np.ndarray, np.ndarray]:
    ids = encode(text())
    starts = np.arange(0, len(ids) - WINDOW - 1 + 1, STRIDE)
    rows = np.stack([ids[s:s + WINDOW + 1] for s in starts])
    return rows[:, :-1], rows[:, 1:]


def _cut(n: int) -> int:
    return int(n * TRAIN_SHARE)


def train_set():
    """(ids [N, WINDOW] int64, next ids [N, WINDOW] int64): the first 90 % of the windows."""
    x, y = _windows()
    return x[:_cut(len(x))], y[:_cut(len(x))]


def test_set():
    """(ids, next ids) of the last 10 % of the windows."""
    x, y = _windows()
    return x[_cut(len(x)):], y[_cut(len(x)):]

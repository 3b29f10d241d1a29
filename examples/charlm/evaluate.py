"""Held-out loss and next-character accuracy of a character model: an ONNX file (e.g. `tag deploy --export
trained.onnx`) or a .pt state_dict of `make_model.CharLM` (`--export weights.pt`), on the last 10 % of the windows
of `charlm.py`; then a greedy continuation of a prompt.

    python examples/charlm/evaluate.py trained.onnx [--prompt "The dataset "] [--chars 64]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from charlm import WINDOW, decode, encode, test_set  # noqa: E402


def load(model_path: str):
    """A callable ids [rows, WINDOW] int64 -> logits [rows, WINDOW, VOCAB]."""
    if model_path.endswith(".onnx"):
        import onnx

        from tag.deploy.onnx_torch import TorchProgram

        return TorchProgram(onnx.load(model_path))
    from make_model import charlm

    model = charlm()
    model.load_state_dict(torch.load(model_path, weights_only=True))
    return model.eval()


def scores(model) -> tuple[float, float]:
    """(mean cross entropy in nats per character, fraction of characters predicted right) on the test windows."""
    x, y = (torch.from_numpy(a) for a in test_set())
    with torch.no_grad():
        logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return float(loss), float((logits.argmax(-1) == y).double().mean())


def continue_text(model, prompt: str, chars: int) -> str:
    """`prompt` followed by `chars` greedy next characters (the model sees the last WINDOW characters)."""
    ids = list(encode(prompt))
    for _ in range(chars):
        window = ([ord(" ")] * WINDOW + ids)[-WINDOW:]  # left-padded: the last character is at WINDOW - 1
        with torch.no_grad():
            logits = model(torch.tensor([window], dtype=torch.int64))
        ids.append(int(np.argmax(logits[0, WINDOW - 1].numpy())))
    return decode(ids)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="trained .onnx or .pt")
    p.add_argument("--prompt", default="The dataset ")
    p.add_argument("--chars", type=int, default=64)
    a = p.parse_args()
    m = load(a.model)
    loss, acc = scores(m)
    print(f"test loss: {loss:.4f} nats per character; next-character accuracy: {acc:.4f} "
          f"({len(test_set()[1]) * WINDOW} held-out characters)")
    print(repr(continue_text(m, a.prompt, a.chars)))

"""Test accuracy of a digits model: an ONNX file (e.g. `tag deploy --export trained.onnx`) or a .pt state_dict
of the MLP (`--export weights.pt`), on the 360 held-out rows of `digits.py`.

    python examples/digits/evaluate.py trained.onnx
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from digits import test_set  # noqa: E402


def accuracy(model_path: str) -> float:
    """Fraction of held-out rows whose largest logit is the label."""
    x, y = test_set()
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    with torch.no_grad():
        if model_path.endswith(".onnx"):
            import onnx

            from tag.deploy.onnx_torch import TorchProgram

            logits = TorchProgram(onnx.load(model_path))(x)
        else:
            from make_model import mlp

            model = mlp()
            model.load_state_dict(torch.load(model_path, weights_only=True))
            logits = model(x)
    return float((logits.argmax(dim=1) == y).float().mean())


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="trained .onnx or .pt")
    a = p.parse_args()
    print(f"test accuracy: {accuracy(a.model):.4f} ({len(test_set()[1])} held-out images)")

"""Write digits_mlp.onnx: a 64-128-10 MLP (ReLU) as torch builds it, seeded, batch axis symbolic.

    python examples/digits/make_model.py [-o digits_mlp.onnx] [--seed 0]

The ONNX initializers keep the module's parameter names (0.weight, 0.bias, 2.weight, 2.bias), which are the
names `tag deploy --export weights.pt` writes back.
"""

from __future__ import annotations

import argparse

import torch


def mlp(seed: int = 0) -> torch.nn.Sequential:
    """The model: Linear(64, 128), ReLU, Linear(128, 10) with torch's default initialisation under `seed`."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def export(path: str, seed: int = 0) -> None:
    model = mlp(seed).eval()
    torch.onnx.export(model, (torch.zeros(2, 64),), path, input_names=["pixels"], output_names=["logits"],
                      dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False,
                      verbose=False)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="digits_mlp.onnx")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    export(a.output, a.seed)
    print(a.output)

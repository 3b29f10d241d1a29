"""Write charlm.onnx: a small causal transformer over characters (GPT-style), seeded, batch axis symbolic.

    python examples/charlm/make_model.py [-o charlm.onnx] [--seed 0]

ids [batch, 32] int64 -> logits [batch, 32, 128]: token and position embeddings (width 64), two pre-norm blocks
(4-head causal self-attention, a 4x GELU MLP), a final LayerNorm and a linear head. The ONNX initializers keep the
module's parameter names (exported with `optimize=False`: the optimiser would fold each Linear's transposed weight
into a new constant), which `tag deploy --export weights.pt` writes back.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from charlm import VOCAB, WINDOW  # noqa: E402

WIDTH, HEADS, LAYERS = 64, 4, 2


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(w, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, w // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(w // self.heads) + mask, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, w))
        return x + self.down(nn.functional.gelu(self.up(self.ln2(x))))


class CharLM(nn.Module):
    """[batch, WINDOW] ids -> [batch, WINDOW, VOCAB] next-character logits; position p sees positions <= p."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(WINDOW, WIDTH) * 0.02)
        self.blocks = nn.ModuleList(Block(WIDTH, HEADS) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        # 1 where position p may not see position q (q > p). An integer buffer: tag deploy trains every float
        # initializer of the file (docs/deploy.md, "Parameters"), and a float mask would become one
        self.register_buffer("future", torch.ones(WINDOW, WINDOW, dtype=torch.int64).triu(1), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos
        mask = self.future.to(x.dtype) * -1e9  # additive: -1e9 on the future positions
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def charlm(seed: int = 0) -> CharLM:
    """The model with torch's default initialisation under `seed`."""
    torch.manual_seed(seed)
    return CharLM()


def export(path: str, seed: int = 0) -> None:
    model = charlm(seed).eval()
    torch.onnx.export(model, (torch.zeros(2, WINDOW, dtype=torch.int64),), path, input_names=["ids"],
                      output_names=["logits"], dynamic_shapes=({0: torch.export.Dim("batch")},),
                      external_data=False, verbose=False, optimize=False)  # optimize=False: no folded weights


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="charlm.onnx")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    export(a.output, a.seed)
    print(a.output)

"""Small models for the tensor-sharding deploy tests (issue 22), exported with the dynamo exporter as datasets/zoo does.

* `Mlp2`: Linear(16, 24) -> ReLU -> Linear(24, 8): a Megatron pair (the hidden 24 units split 1:2 are 8 and 16).
* `TinyGpt`: token and position embeddings, one pre-norm block (LayerNorm, separate q / k / v Linear layers, 6 heads
  of 4 (a view with explicit heads), causal softmax attention, the heads merged back by a reshape with -1, output
  projection, residual; LayerNorm, MLP 24 -> 96 -> 24 with GELU, residual), a final LayerNorm and an untied head.
* `TiedLm`: an embedding table read by the lookup and by the output layer (tied weights).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Mlp2(nn.Module):
    def __init__(self, d_in: int = 16, hidden: int = 24, d_out: int = 8):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class TinyGpt(nn.Module):
    def __init__(self, vocab: int = 32, seq: int = 8, d: int = 24, heads: int = 6, d_ff: int = 96):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)), persistent=False)
        self.register_buffer("positions", torch.arange(seq), persistent=False)

    def forward(self, ids):
        b, s = ids.shape
        x = self.tok(ids) + self.pos(self.positions[:s])
        h = self.ln1(x)
        q, k, v = (lin(h).view(b, s, self.heads, self.hd).transpose(1, 2) for lin in (self.q, self.k, self.v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        att = att.masked_fill(~self.causal[:s, :s], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, -1)
        x = x + self.o(y)
        x = x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))
        return self.head(self.lnf(x))


class TiedLm(nn.Module):
    """A token's embedding (32 x 16) -> Linear(16, 24) -> ReLU -> Linear(24, 16) -> logits against the same embedding
    table (F.linear: a Gemm with transB reading it): one weight tensor read by the first and the last op."""

    def __init__(self, vocab: int = 32, d: int = 16, hidden: int = 24):
        super().__init__()
        self.tok, self.fc1, self.fc2 = nn.Embedding(vocab, d), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, ids):
        return nn.functional.linear(self.fc2(torch.relu(self.fc1(self.tok(ids)))), self.tok.weight)


def export(model: nn.Module, example: torch.Tensor, path: str, seed: int = 0) -> str:
    """Export `model` (weights seeded `seed`) at the example's batch with the dynamo exporter; returns `path`."""
    import onnx

    torch.manual_seed(seed)
    for p in model.parameters():
        nn.init.normal_(p, std=0.3)
    model.eval()
    program = torch.onnx.export(model, (example,), dynamo=True, opset_version=20, verbose=False,
                                input_names=["x"], output_names=["y"])
    onnx.save(program.model_proto, path)
    return path


def mlp2(path: str, batch: int) -> str:
    return export(Mlp2(), torch.zeros(batch, 16), path)


def tied_lm(path: str, batch: int) -> str:
    return export(TiedLm(), torch.zeros(batch, dtype=torch.int64), path)


def tiny_gpt(path: str, batch: int) -> str:
    return export(TinyGpt(), torch.zeros(batch, 8, dtype=torch.int64), path)

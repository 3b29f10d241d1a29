"""Transformer building blocks written with plain matmuls and softmax (they export cleanly to ONNX).

Shapes: x is (batch, tokens, d_model); heads split d_model into (heads, d_model / heads).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def causal_mask(tokens: int, like: torch.Tensor) -> torch.Tensor:
    """Additive (tokens, tokens) mask: 0 on and below the diagonal, -inf above (computed in the graph)."""
    full = torch.full((tokens, tokens), float("-inf"), dtype=like.dtype, device=like.device)
    return torch.triu(full, diagonal=1)


def sinusoidal_positions(tokens: int, d_model: int, like: torch.Tensor) -> torch.Tensor:
    """(tokens, d_model) sinusoidal encoding of Vaswani et al.: sin on even, cos on odd features."""
    pos = torch.arange(tokens, device=like.device).to(like.dtype).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d_model, 2, device=like.device).to(like.dtype)
                     * (-math.log(10000.0) / d_model))
    angle = pos * freq
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(-2)


class MultiHeadAttention(nn.Module):
    """softmax(Q K^T / sqrt(d_head) + mask) V over `heads` heads, then an output projection.

    fused_qkv=True uses one (d, 3d) projection (GPT-2's c_attn); parameter count is the same either way:
    4 d^2 + 4 d.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.1, fused_qkv: bool = False):
        super().__init__()
        self.heads, self.d_head = heads, d_model // heads
        self.fused_qkv = fused_qkv
        if fused_qkv:
            self.qkv = nn.Linear(d_model, 3 * d_model)
        else:
            self.q, self.k, self.v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, self.d_head)).transpose(1, 2)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.fused_qkv:
            qkv = self.qkv(x)
            d = qkv.shape[-1] // 3
            q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
        else:
            source = x if memory is None else memory
            q, k, v = self.q(x), self.k(source), self.v(source)
        q, k, v = self._split(q), self._split(k), self._split(v)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores + mask
        weights = self.dropout(torch.softmax(scores, dim=-1))
        context = torch.matmul(weights, v).transpose(1, 2).flatten(-2)
        return self.out(context)


class FeedForward(nn.Module):
    """Linear(d, d_ff) -> activation -> dropout -> Linear(d_ff, d)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", dropout: float = 0.1):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self.act(self.fc1(x))))


class PostLNLayer(nn.Module):
    """Post-LN block (BERT, original Transformer): x = LN(x + SelfAttn(x)); [x = LN(x + CrossAttn(x, mem))];
    x = LN(x + FFN(x)). cross=True adds the decoder's encoder-decoder attention."""

    def __init__(self, d_model: int, heads: int, d_ff: int, activation: str = "gelu",
                 cross: bool = False, eps: float = 1e-12, dropout: float = 0.1):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, heads, dropout)
        self.ln1 = nn.LayerNorm(d_model, eps=eps)
        self.cross = MultiHeadAttention(d_model, heads, dropout) if cross else None
        self.ln_cross = nn.LayerNorm(d_model, eps=eps) if cross else None
        self.ffn = FeedForward(d_model, d_ff, activation, dropout)
        self.ln2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.ln1(x + self.dropout(self.attn(x, mask=mask)))
        if self.cross is not None:
            x = self.ln_cross(x + self.dropout(self.cross(x, memory=memory)))
        return self.ln2(x + self.dropout(self.ffn(x)))


class PreLNLayer(nn.Module):
    """Pre-LN block (GPT-2): x = x + Attn(LN(x), causal); x = x + FFN(LN(x))."""

    def __init__(self, d_model: int, heads: int, d_ff: int, eps: float = 1e-5, dropout: float = 0.1):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model, eps=eps)
        self.attn = MultiHeadAttention(d_model, heads, dropout, fused_qkv=True)
        self.ln2 = nn.LayerNorm(d_model, eps=eps)
        self.ffn = FeedForward(d_model, d_ff, "gelu", dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attn(self.ln1(x), mask=mask))
        return x + self.dropout(self.ffn(self.ln2(x)))

"""Language models in plain torch: the Transformer-base NMT model, BERT and GPT-2 (and their tiny variants).

Token ids are int64 (batch, tokens) inputs; sequence lengths are fixed at export. Position tables are
sliced to the sequence length in the graph (no integer buffers), so the models build on the meta device.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .layers import PostLNLayer, PreLNLayer, causal_mask, sinusoidal_positions


class Seq2SeqTransformer(nn.Module):
    """Vaswani et al. (2017) encoder-decoder: shared (src, tgt, output) embedding scaled by sqrt(d),
    sinusoidal positions, post-LN ReLU layers; returns (batch, tgt_tokens, vocab) logits."""

    def __init__(self, vocab: int = 32000, d_model: int = 512, heads: int = 8, d_ff: int = 2048,
                 layers: int = 6):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab, d_model)
        self.encoder = nn.ModuleList(PostLNLayer(d_model, heads, d_ff, "relu", eps=1e-5)
                                     for _ in range(layers))
        self.decoder = nn.ModuleList(PostLNLayer(d_model, heads, d_ff, "relu", cross=True, eps=1e-5)
                                     for _ in range(layers))
        self.dropout = nn.Dropout(0.1)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids) * math.sqrt(self.d_model)
        return self.dropout(x + sinusoidal_positions(ids.shape[1], self.d_model, x))

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        memory = self._embed(src)
        for layer in self.encoder:
            memory = layer(memory)
        x = self._embed(tgt)
        mask = causal_mask(tgt.shape[1], x)
        for layer in self.decoder:
            x = layer(x, memory=memory, mask=mask)
        return F.linear(x, self.embedding.weight)


class Bert(nn.Module):
    """BERT encoder (Devlin et al. 2019): word + position + token-type(0) embeddings, LayerNorm, post-LN
    GELU layers, tanh pooler on the first token. Returns (sequence_output, pooled_output)."""

    def __init__(self, vocab: int = 30522, d_model: int = 1024, heads: int = 16, d_ff: int = 4096,
                 layers: int = 24, max_positions: int = 512, type_vocab: int = 2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d_model)
        self.position_embeddings = nn.Embedding(max_positions, d_model)
        self.token_type_embeddings = nn.Embedding(type_vocab, d_model)
        self.ln = nn.LayerNorm(d_model, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.layers = nn.ModuleList(PostLNLayer(d_model, heads, d_ff, "gelu", eps=1e-12)
                                    for _ in range(layers))
        self.pooler = nn.Linear(d_model, d_model)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = input_ids.shape[1]
        x = (self.word_embeddings(input_ids) + self.position_embeddings.weight[:tokens]
             + self.token_type_embeddings.weight[0])
        x = self.dropout(self.ln(x))
        for layer in self.layers:
            x = layer(x)
        return x, torch.tanh(self.pooler(x[:, 0]))


class GPT2(nn.Module):
    """GPT-2 (Radford et al. 2019): token + learned position embeddings, pre-LN causal blocks, final
    LayerNorm, LM head tied to the token embedding (one weight tensor). Returns (batch, tokens, vocab)."""

    def __init__(self, vocab: int = 50257, d_model: int = 1024, heads: int = 16, layers: int = 24,
                 max_positions: int = 1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(max_positions, d_model)
        self.dropout = nn.Dropout(0.1)
        self.blocks = nn.ModuleList(PreLNLayer(d_model, heads, 4 * d_model) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        tokens = input_ids.shape[1]
        x = self.dropout(self.wte(input_ids) + self.wpe.weight[:tokens])
        mask = causal_mask(tokens, x)
        for block in self.blocks:
            x = block(x, mask)
        return F.linear(self.ln_f(x), self.wte.weight)


def transformer_base() -> nn.Module:
    """Transformer-base NMT: d 512, 6 + 6 layers, 8 heads, d_ff 2048, 32,000 shared vocabulary."""
    return Seq2SeqTransformer()


def transformer_tiny() -> nn.Module:
    """Transformer NMT at CI size: d 64, 2 + 2 layers, 4 heads, d_ff 256, 1,000 vocabulary."""
    return Seq2SeqTransformer(vocab=1000, d_model=64, heads=4, d_ff=256, layers=2)


def bert_large() -> nn.Module:
    """BERT-large: 24 layers, d 1024, 16 heads, d_ff 4096, 30,522 vocabulary, 512 positions, pooler."""
    return Bert()


def bert_tiny() -> nn.Module:
    """BERT at CI size: 2 layers, d 64, 2 heads, d_ff 256, 2,048 vocabulary, 128 positions."""
    return Bert(vocab=2048, d_model=64, heads=2, d_ff=256, layers=2, max_positions=128)


def gpt2_medium() -> nn.Module:
    """GPT-2 medium: 24 layers, d 1024, 16 heads, 50,257 vocabulary, 1,024 positions, tied LM head."""
    return GPT2()


def gpt2_tiny() -> nn.Module:
    """GPT-2 at CI size: 2 layers, d 64, 2 heads, 2,048 vocabulary, 64 positions, tied LM head."""
    return GPT2(vocab=2048, d_model=64, heads=2, layers=2, max_positions=64)


class SmallTransformer(nn.Module):
    """A 2-layer post-LN encoder classifier for fast tests: token + learned position embeddings,
    d 128, 4 heads, d_ff 512, mean over tokens, Linear to 10 classes."""

    def __init__(self, vocab: int = 1000, d_model: int = 128, heads: int = 4, d_ff: int = 512,
                 layers: int = 2, tokens: int = 32, classes: int = 10):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(tokens, d_model)
        self.layers = nn.ModuleList(PostLNLayer(d_model, heads, d_ff, "gelu", eps=1e-5)
                                    for _ in range(layers))
        self.head = nn.Linear(d_model, classes)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(input_ids) + self.positions.weight[:input_ids.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(dim=1))


def small_transformer() -> nn.Module:
    """SmallTransformer: 2 layers, d 128, sequence 32, 1,000 vocabulary, 10 classes."""
    return SmallTransformer()

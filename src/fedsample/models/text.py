"""Text classifiers on int64 token ids (0 = padding): Kim's Text-CNN and a small Transformer encoder.

Both run in the vectorized engine (``torch.func.vmap`` over clients): attention is written with plain tensor
operations (no ``nn.TransformerEncoderLayer``, whose fast path and nested tensors ``vmap`` cannot run) and every
dropout is its own ``nn.Dropout`` module called once per forward, so the engines inject per-client masks
(:mod:`fedsample.training.random_layers`). There is no dropout on the attention probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from fedsample import checks
from fedsample.models.common import DROPOUT, WIDTHS, as_tuple, outputs

__all__ = ["TextCNN", "TokenModel", "Transformer", "check_token_ids"]

VOCABULARY = checks.integers(2)

PAD = 0  # token id of padding (the loader's vocabulary: 0 = pad, 1 = unknown)


def token_shape(spec: object, input_shape: tuple[int, ...], shortest: int = 1) -> int:
    """The sequence length of ``(seq_len,)`` token inputs (one ``ValueError`` line for anything else)."""
    if len(input_shape) != 1 or input_shape[0] < shortest:
        raise ValueError(
            f"{type(spec).__name__} needs token-id inputs of shape (seq_len,) with seq_len >= {shortest}, got {input_shape}; "
            "load the text with representation='tokens'"
        )
    return input_shape[0]


class TokenModel(nn.Module):
    """A model that reads int64 token ids through its declared embedding ``tokens`` (:class:`TextCNN`'s and
    :class:`Transformer`'s modules; a user's text model derives from it to have its inputs checked)."""

    tokens: nn.Embedding


def check_token_ids(module: nn.Module, x: torch.Tensor) -> None:
    """For a :class:`TokenModel`: ``x`` must be integer ids below its vocabulary size (else one ``ValueError`` line
    naming the remedy). Other models: nothing to check."""
    if not isinstance(module, TokenModel):
        return
    tokens = module.tokens
    if x.dtype.is_floating_point or x.dtype == torch.bool:
        raise ValueError(f"{type(module).__name__} takes int64 token ids, got {x.dtype} inputs; load the text with representation='tokens'")
    if len(x) and int(x.max()) >= tokens.num_embeddings:
        raise ValueError(
            f"token id {int(x.max())} >= the model's vocab_size {tokens.num_embeddings}; "
            "give the model the dataset's vocab_size (its meta['vocab_size'])"
        )


def embed(tokens: nn.Embedding, x: torch.Tensor) -> torch.Tensor:
    """Token embeddings with padding positions set to zero by a mask, not by ``padding_idx`` alone: under
    ``vmap`` the embedding's backward does not honour ``padding_idx``, the mask makes the padding row's gradient
    zero in both engines."""
    embedded: torch.Tensor = tokens(x) * (x != PAD).unsqueeze(-1).to(tokens.weight.dtype)
    return embedded


class TextCNNNet(TokenModel):
    """The Text-CNN module: see :class:`TextCNN`."""

    def __init__(self, vocab_size: int, dim: int, widths: tuple[int, ...], filters: int, dropout: float, classes: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.convs = nn.ModuleList(nn.Conv1d(dim, filters, w) for w in widths)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(filters * len(widths), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = embed(self.tokens, x).transpose(1, 2)  # (batch, dim, seq_len)
        pooled = [torch.relu(conv(e)).amax(dim=2) for conv in self.convs]  # max over time
        logits: torch.Tensor = self.out(self.dropout(torch.cat(pooled, dim=1)))
        return logits


@dataclass(frozen=True)
@checks.constrained(vocab_size=VOCABULARY, dim=checks.COUNT, widths=WIDTHS, filters=checks.COUNT, dropout=DROPOUT)
class TextCNN:
    """Text-CNN (Kim 2014, §2): token embedding (``vocab_size`` x ``dim``, padding row fixed at zero),
    parallel 1-D convolutions of widths ``widths`` with ``filters`` feature maps each, ReLU, max-over-time
    pooling, dropout, one linear layer. Kim's static settings: widths (3, 4, 5), 100 filters, dropout 0.5
    (his 300-d word2vec embeddings are trained from scratch here: no download)."""

    vocab_size: int = 10_000
    dim: int = 128
    widths: tuple[int, ...] = (3, 4, 5)
    filters: int = 100
    dropout: float = 0.5
    name: ClassVar[str] = "textcnn"

    def __post_init__(self) -> None:
        as_tuple(self, "widths")

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        token_shape(self, input_shape, shortest=max(self.widths))
        return TextCNNNet(self.vocab_size, self.dim, self.widths, self.filters, self.dropout, outputs(num_classes))


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017, eq. 1) in plain tensor operations,
    padding keys masked out."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, length, dim = h.shape
        q, k, v = self.qkv(h).reshape(b, length, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dim // self.heads)  # (batch, heads, query, key)
        scores = scores.masked_fill(~keep[:, None, None, :], -1e9)  # finite: an all-padding row stays a number
        mixed = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, length, dim)
        projected: torch.Tensor = self.proj(mixed)
        return projected


class EncoderLayer(nn.Module):
    """A pre-norm Transformer encoder layer: h + drop(attn(LN(h))), then h + drop(FF(LN(h))), FF = W2 relu(W1 .)."""

    def __init__(self, dim: int, heads: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.attn, self.drop1 = nn.LayerNorm(dim), SelfAttention(dim, heads), nn.Dropout(dropout)
        self.norm2, self.drop2 = nn.LayerNorm(dim), nn.Dropout(dropout)
        self.ff = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        h = h + self.drop1(self.attn(self.norm1(h), keep))
        out: torch.Tensor = h + self.drop2(self.ff(self.norm2(h)))
        return out


class TransformerNet(TokenModel):
    """The Transformer classifier module: see :class:`Transformer`."""

    def __init__(self, vocab_size: int, seq_len: int, dim: int, heads: int, layers: int, hidden: int, dropout: float, classes: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.positions = nn.Embedding(seq_len, dim)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, hidden, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = x != PAD
        h = self.dropout(embed(self.tokens, x) + self.positions(torch.arange(x.shape[-1], device=x.device)))
        for layer in self.layers:
            h = layer(h, keep)
        weight = keep.to(h.dtype).unsqueeze(-1)
        pooled = (self.norm(h) * weight).sum(dim=1) / weight.sum(dim=1).clamp_min(1.0)  # mean over real tokens
        logits: torch.Tensor = self.out(pooled)
        return logits


@dataclass(frozen=True)
@checks.constrained(
    vocab_size=VOCABULARY, dim=checks.COUNT, heads=checks.COUNT, layers=checks.COUNT, hidden=checks.COUNT, dropout=DROPOUT,
)
class Transformer:
    """A small Transformer encoder for text classification (Vaswani et al. 2017): token and learned position
    embeddings, ``layers`` pre-norm encoder layers (``heads`` attention heads, feed-forward width ``hidden``,
    dropout on the embeddings and on each residual branch), a final LayerNorm, the mean over non-padding tokens,
    one linear layer. ``dim`` must be divisible by ``heads``."""

    vocab_size: int = 10_000
    dim: int = 64
    heads: int = 4
    layers: int = 2
    hidden: int = 128
    dropout: float = 0.1
    name: ClassVar[str] = "transformer"

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"Transformer dim must be divisible by heads, got dim={self.dim}, heads={self.heads}")

    def build(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        seq_len = token_shape(self, input_shape)
        return TransformerNet(self.vocab_size, seq_len, self.dim, self.heads, self.layers, self.hidden, self.dropout, outputs(num_classes))

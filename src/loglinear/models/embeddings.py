"""`INPUT_EMBEDDINGS`: how the model turns tokens into vectors, by name.

- "lookup": a row of the embedding table per token (every task but one).
- "stacked": zoology's stacked MQAR (synthetics/stacked_mqar.py), whose context positions each hold a key and its
  value: with K keys and K values, tokens 0 .. 2K-1 look up their row, and the pair token 2K + iK + j is the sum of
  key i's row and value j's (K + j), as zoology feeds a key's and a value's embedding to one position through a
  linear layer. K follows from the vocabulary, 2K + K^2 tokens.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from loglinear.registry import Registry


class StackedEmbedding(nn.Embedding):
    """An embedding table whose pair tokens (2K + iK + j) are the sum of two of its rows, key i's and value j's (K + j);
    a subclass of `nn.Embedding`, so its table starts, decays and ties to the LM head as any embedding does (the pair
    tokens' own rows are read by the LM head only)."""

    def __init__(self, vocab_size: int, d_model: int) -> None:
        keys = math.isqrt(vocab_size + 1) - 1
        if keys < 1 or (keys + 1) ** 2 != vocab_size + 1:
            raise ValueError(f"a stacked embedding needs 2K + K^2 tokens (K keys, K values, their K^2 pairs), got "
                             f"vocab_size {vocab_size}")
        super().__init__(vocab_size, d_model)
        self.keys = keys

    def forward(self, tokens: Tensor) -> Tensor:
        keys = self.keys
        pair = tokens >= 2 * keys
        key, value = (tokens - 2 * keys).clamp_min(0).div(keys, rounding_mode="floor"), (tokens - 2 * keys) % keys
        first = super().forward(torch.where(pair, key, tokens))
        return first + pair[..., None] * super().forward(keys + value)


INPUT_EMBEDDINGS: Registry[type[nn.Embedding]] = Registry(
    "input embedding", (("lookup", nn.Embedding), ("stacked", StackedEmbedding)))
"""Name -> the embedding's class, built as `cls(vocab_size, d_model)`."""

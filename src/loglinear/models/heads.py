"""`OUTPUT_HEADS`: what turns the blocks' output into the features the final norm and LM head read, by name.

- "lm": nothing (each position's logits come from its own state): every task but compression.
- "decoder": MAD's AutoEncoder decoder (Poli et al. 2024): every position's logits come from the last
  position's state alone, so the model must compress the sequence into it (the compression task).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loglinear.models.layers import RMSNorm
from loglinear.registry import Registry


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """(length, dim): sin(p w_i) in the first half of the features, cos(p w_i) in the second, w_i = 10000^(-i / (dim/2))
    (Vaswani et al. 2017); an odd last feature is 0."""
    half = dim // 2
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / max(half, 1))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * frequencies
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, :half], table[:, half : 2 * half] = angles.sin(), angles.cos()
    return table.float()


class DecoderHead(nn.Module):
    """h (B, T, d) -> (B, T, d): position p gets MLP(h[:, -1] + pos[p]), pos the sinusoidal table; the MLP is
    MAD's non-expanding decoder, RMSNorm -> Linear -> GELU, twice. Its logits are then the model's final
    norm and LM head, as everywhere (MAD's own unembedding is a norm and a linear layer with a bias)."""

    def __init__(self, d_model: int, max_len: int, eps: float) -> None:
        super().__init__()
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model), persistent=False)
        self.norm_in = RMSNorm(d_model, eps)
        self.proj_in = nn.Linear(d_model, d_model)
        self.norm_out = RMSNorm(d_model, eps)
        self.proj_out = nn.Linear(d_model, d_model)

    def forward(self, h: Tensor) -> Tensor:
        x = h[:, -1:] + self.positions[: h.shape[1]].to(h.dtype)
        x = F.gelu(self.proj_in(self.norm_in(x)))
        return F.gelu(self.proj_out(self.norm_out(x)))


OUTPUT_HEADS: Registry[type[nn.Module]] = Registry("output head", (("lm", nn.Identity), ("decoder", DecoderHead)))
"""Name -> the head's class, built as `cls(d_model, max_len, norm_eps)` (nn.Identity ignores them)."""

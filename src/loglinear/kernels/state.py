"""The decoding state of log-linear attention: O(log T) level states plus each sequence's position."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LogLinearState:
    """Level states of a batch of sequences.

    levels:   (B, H, L, V, K) the Fenwick level states S^(0..L-1) (one level for lam=None); float32,
              or float64 when the inputs were float64.
    position: (B,) int64, tokens consumed so far per sequence (the absolute position of the next token).
    """

    levels: Tensor
    position: Tensor

    @classmethod
    def zeros(
        cls,
        batch_size: int,
        num_heads: int,
        num_levels: int,
        head_v: int,
        head_k: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> LogLinearState:
        levels = torch.zeros(batch_size, num_heads, num_levels, head_v, head_k, device=device, dtype=dtype)
        return cls(levels, torch.zeros(batch_size, dtype=torch.int64, device=device))

    @property
    def last_position(self) -> Tensor:
        """Position of the last consumed token, 0 for a fresh state (see fenwick.state_bucket_levels)."""
        return (self.position - 1).clamp_min(0)

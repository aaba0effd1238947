"""How often a mixer's transitions have a negative eigenvalue, per head: the state-tracking diagnostic.

With `negative_eigenvalues`, Mamba-2's decay alpha = 2 exp(dt A) - 1 is negative once dt A > ln 2, and Gated
DeltaNet's transition alpha (I - beta k k^T) has the eigenvalue alpha (1 - beta) < 0 along k once beta > 1.
Parity is learned only by using them, so a head that never goes negative on any token cannot track it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def negative_eigenvalue(sign: Tensor | None, beta: Tensor | None) -> Tensor | None:
    """(..., H) bool: where the transition's eigenvalue sign(alpha) (1 - beta) is negative (beta absent: 1 - beta = 1);
    None when neither a signed decay nor a beta is given (the eigenvalue is then alpha >= 0)."""
    if sign is None and beta is None:
        return None
    eigenvalue_sign = torch.ones(()) if sign is None else sign
    if beta is not None:
        eigenvalue_sign = eigenvalue_sign * (1 - beta)
    return eigenvalue_sign < 0


class TransitionCounts:
    """Running per-head counts of tokens and of tokens whose transition has a negative eigenvalue."""

    def __init__(self, n_heads: int) -> None:
        self.negative = torch.zeros(n_heads, dtype=torch.float64)
        self.tokens = 0

    def add(self, negative: Tensor) -> None:
        """negative: (..., H) bool, one entry per token and head."""
        flat = negative.detach().reshape(-1, negative.shape[-1])
        self.negative += flat.sum(0).to(device="cpu", dtype=torch.float64)
        self.tokens += flat.shape[0]

    def fractions(self) -> list[float]:
        """Per head, the fraction of the counted tokens with a negative eigenvalue (empty before any token)."""
        return [] if self.tokens == 0 else (self.negative / self.tokens).tolist()

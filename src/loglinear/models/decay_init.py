"""Initial decay parameters of Mamba-2 and Gated DeltaNet, whose decay is exp(-exp(A_log) softplus(x + dt_bias))."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from loglinear.models.layers import inverse_softplus

DT_MIN = 1e-3
"""Initial step sizes dt are log-uniform from DT_MIN to `ModelConfig.dt_init_max` (Mamba: 1e-3 to 0.1)."""
A_RANGE = (1.0, 16.0)
"""Initial decay rates A = exp(A_log) are uniform in this range (Mamba-2 convention)."""


def initial_dt_bias(n_heads: int, dt_max: float, generator: torch.Generator | None = None) -> Tensor:
    """softplus^-1(dt) with dt log-uniform in [DT_MIN, dt_max], so that softplus(0 + dt_bias) = dt at start."""
    lo, hi = math.log(DT_MIN), math.log(dt_max)
    dt = torch.exp(torch.rand(n_heads, generator=generator) * (hi - lo) + lo).clamp_min(1e-4)
    return inverse_softplus(dt)


def initial_A_log(n_heads: int, generator: torch.Generator | None = None) -> Tensor:
    return torch.empty(n_heads).uniform_(*A_RANGE, generator=generator).log()

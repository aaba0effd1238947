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
A_INITS = ("uniform", "arange")
"""Rules for Mamba-2's initial A (`ModelConfig.A_init`): "uniform" in a range (mamba_ssm's Mamba2, [1, 16]);
"arange": A = 1, 2, ..., H over the heads (Hugging Face transformers' Mamba2Mixer; S4D-Real's A_n = n + 1 over
the state, Mamba-1)."""


def initial_dt_bias(n_heads: int, dt_max: float, generator: torch.Generator | None = None) -> Tensor:
    """softplus^-1(dt) with dt log-uniform in [DT_MIN, dt_max], so that softplus(0 + dt_bias) = dt at start."""
    lo, hi = math.log(DT_MIN), math.log(dt_max)
    dt = torch.exp(torch.rand(n_heads, generator=generator) * (hi - lo) + lo).clamp_min(1e-4)
    return inverse_softplus(dt)


def initial_A_log(
    n_heads: int, generator: torch.Generator | None = None, *, rule: str = "uniform",
    a_range: tuple[float, float] = A_RANGE,
) -> Tensor:
    """log A per head: A uniform in a_range, or A = 1..n_heads for the "arange" rule (which draws nothing)."""
    if rule == "arange":
        return torch.arange(1, n_heads + 1, dtype=torch.float32).log()
    if rule != "uniform":
        raise ValueError(f"unknown A init rule {rule!r}; valid: {', '.join(A_INITS)}")
    return torch.empty(n_heads).uniform_(*a_range, generator=generator).log()

"""Shared input builders and error measures for the kernel tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from loglinear.kernels import num_levels


@dataclass
class Inputs:
    q: Tensor
    k: Tensor
    v: Tensor
    g: Tensor
    lam: Tensor | None
    beta: Tensor | None

    def args(self) -> tuple:
        return self.q, self.k, self.v, self.g, self.lam, self.beta

    def slice(self, start: int, stop: int) -> Inputs:
        return Inputs(*(None if x is None else x[:, start:stop] for x in self.args()))

    def at(self, t: int) -> tuple:
        return tuple(None if x is None else x[:, t] for x in self.args())

    def requires_grad_(self) -> Inputs:
        for x in self.args():
            if x is not None:
                x.requires_grad_(True)
        return self


def make_inputs(
    B: int, T: int, H: int, K: int, V: int, *, delta: bool, levels: bool = True, extra_levels: int = 0,
    offset: int = 0, dtype: torch.dtype = torch.float64, seed: int = 0, beta_max: float = 1.0,
) -> Inputs:
    """Random well-conditioned inputs: unit-norm keys, decays in (e^-1, 1], positive lambdas."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    k = rand(B, T, H, K)
    k = k / k.norm(dim=-1, keepdim=True)
    L = num_levels(offset + T) + extra_levels
    lam = torch.rand(B, T, H, L, generator=gen, dtype=torch.float64) + 0.1 if levels else None
    beta = beta_max * torch.rand(B, T, H, generator=gen, dtype=torch.float64) if delta else None
    g = -torch.rand(B, T, H, generator=gen, dtype=torch.float64)

    def cast(x: Tensor | None) -> Tensor | None:
        return None if x is None else x.to(dtype)

    return Inputs(cast(rand(B, T, H, K) / K**0.5), cast(k), cast(rand(B, T, H, V)), cast(g), cast(lam), cast(beta))


def rel_err(actual: Tensor, expected: Tensor) -> float:
    """Largest absolute error relative to the largest magnitude of the reference."""
    scale = expected.detach().abs().max().clamp_min(1e-30)
    return float((actual.detach().to(expected.dtype) - expected.detach()).abs().max() / scale)

"""The shapes and inputs of the kernel benchmark (benchmarks/kernels.py): the paper's and MQAR's shapes of each
variant, tiny ones for a smoke run, and well-conditioned random inputs."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():  # the fused kernels then run in Triton's interpreter (read when triton.jit runs)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from loglinear.kernels import num_levels  # noqa: E402  (after TRITON_INTERPRET is set)

CHUNK = 64


@dataclass(frozen=True)
class Shape:
    B: int
    H: int
    Hk: int
    K: int
    V: int

    def describe(self) -> str:
        return f"B={self.B}, H={self.H}, Hk={self.Hk}, K={self.K}, V={self.V}"


SHAPES = {
    ("mamba2", "paper"): Shape(2, 48, 1, 128, 64),
    ("mamba2", "mqar"): Shape(2, 48, 1, 16, 16),
    ("gdn", "paper"): Shape(2, 48, 48, 64, 64),
    ("gdn", "mqar"): Shape(2, 48, 48, 16, 16),
}
SMOKE_SHAPES = {
    ("mamba2", "paper"): Shape(1, 2, 1, 64, 32),  # fla's log-linear kernel needs K % 64 == 0
    ("mamba2", "mqar"): Shape(1, 2, 1, 16, 16),
    ("gdn", "paper"): Shape(1, 2, 2, 32, 32),
    ("gdn", "mqar"): Shape(1, 2, 2, 16, 16),
}


def make_base(shape: Shape, T: int, delta: bool, dtype: torch.dtype, device: torch.device, seed: int = 0) -> dict:
    """Well-conditioned inputs without grad: q scaled by K^-1/2, unit-norm keys, g in [-0.1, -1e-3],
    lam in [0.5, 1.5]."""
    gen = torch.Generator(device=device).manual_seed(seed)
    B, H, Hk, K, V = shape.B, shape.H, shape.Hk, shape.K, shape.V

    def randn(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=gen, device=device)

    def rand(*s: int) -> torch.Tensor:
        return torch.rand(*s, generator=gen, device=device)

    return {
        "q": (randn(B, T, Hk, K) * K**-0.5).to(dtype),
        "k": F.normalize(randn(B, T, Hk, K), dim=-1).to(dtype),
        "v": randn(B, T, H, V).to(dtype),
        "g": -(rand(B, T, H) * 0.099 + 1e-3),  # float32 log-decays, as models produce them
        "lam": (rand(B, T, H, num_levels(T)) + 0.5).to(dtype),
        "beta": rand(B, T, H).to(dtype) if delta else None,
    }


def leaves(base: dict, names: list[str]) -> list[torch.Tensor]:
    return [base[n].detach().clone().requires_grad_() for n in names]


def expand_heads(x: torch.Tensor, H: int) -> torch.Tensor:
    """(B, T, Hk, K) -> (B, T, H, K), head h reading head h // (H // Hk) (SDPA's and fla's grouping)."""
    return x.repeat_interleave(H // x.shape[2], dim=2).contiguous()

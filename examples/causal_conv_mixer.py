"""A sequence mixer outside the package, in one file: a causal depthwise convolution over the last `width` tokens,
optionally gated by the input. Name it in a run's config by its import path, with the folder holding this file on
PYTHONPATH, and set its own options under `model.mixer_options`:

    PYTHONPATH=examples loglinear train configs/mqar_cpu.yaml model.mixer=causal_conv_mixer:CausalConvMixer \\
        model.mixer_options.width=8 out_dir=runs/conv

docs/adding-a-mixer.md walks through it; tests/models/test_external_mixer.py trains it for a few steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loglinear.checks import check_int
from loglinear.models import Mixer, ModelConfig


@dataclass
class CausalConvOptions:
    """The mixer's own options (`model.mixer_options.*`), typed, with defaults."""

    width: int = 4  # tokens each output reads: itself and the width - 1 before it
    gate: bool = True  # multiply the convolution's output by silu(W_g x)


class CausalConvMixer(Mixer):
    """y_t = W_o (sum_{i < width} k_i * (W_v x)_{t-i}) [* silu(W_g x_t)], per channel."""

    name = "causal_conv"
    display_name = "Causal conv"
    options = CausalConvOptions

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        opts = self.read_options(cfg)
        self.width, self.gate = opts.width, opts.gate
        self.in_proj = nn.Linear(cfg.d_model, (2 if opts.gate else 1) * cfg.d_model, bias=False)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.conv = DepthwiseKernel(cfg.d_model, opts.width)

    @classmethod
    def num_heads(cls, cfg: ModelConfig) -> int:
        return 1

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        check_int("ModelConfig.mixer_options.width", cls.read_options(cfg).width, minimum=1)

    def _gated(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        projected = self.in_proj(x)
        if not self.gate:
            return projected, None
        v, g = projected.chunk(2, dim=-1)
        return v, F.silu(g)

    def forward(self, x: Tensor) -> Tensor:
        v, g = self._gated(x)  # (B, T, D)
        padded = F.pad(v, (0, 0, self.width - 1, 0))  # width - 1 zeros before the first token
        y = sum(self.conv.kernel[i] * padded[:, self.width - 1 - i : padded.shape[1] - i] for i in range(self.width))
        return self.out_proj(y if g is None else y * g)

    def init_cache(self, batch_size: int, max_len: int, *, device: torch.device, dtype: torch.dtype) -> Tensor:
        """The last width - 1 projected inputs, oldest first."""
        return torch.zeros(batch_size, self.width - 1, self.d_model, device=device, dtype=dtype)

    def step(self, x_t: Tensor, cache: Tensor) -> tuple[Tensor, Tensor]:
        v, g = self._gated(x_t)  # (B, D)
        window = torch.cat([cache, v[:, None]], dim=1)  # (B, width, D), newest last
        y = (window * self.conv.kernel.flip(0)).sum(dim=1)
        return self.out_proj(y if g is None else y * g), window[:, 1:]

    def state_size(self, seq_len: int) -> int:
        check_int("seq_len", seq_len, minimum=1)
        return (self.width - 1) * self.d_model


class DepthwiseKernel(nn.Module):
    """kernel[i, c]: the weight of channel c at i tokens back. A module owning parameters directly needs
    `init_parameters(generator)`: every initial weight comes from the generator of its name (models/init.py)."""

    def __init__(self, channels: int, width: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(width, channels))
        self.init_parameters()

    def init_parameters(self, generator: torch.Generator | None = None) -> None:
        with torch.no_grad():
            self.kernel.uniform_(-self.kernel.shape[0] ** -0.5, self.kernel.shape[0] ** -0.5, generator=generator)

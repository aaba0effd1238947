"""The sequence-mixer interface and the `MIXERS` registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from loglinear.models.lambda_params import LambdaHead, lambda_parameter_count
from loglinear.models.registry import Registry

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig

MIXERS: Registry[type["Mixer"]] = Registry("mixer")


class Mixer(nn.Module):
    """A causal sequence mixer (B, T, d_model) -> (B, T, d_model) that can also decode token by token.

    `init_cache` returns the decoding state of a batch; `step(x_t, cache)` maps one token's hidden
    state (B, d_model) to its output and the updated cache (which may be the same object, changed
    in place). Stepping through a sequence reproduces `forward` on it.
    """

    def __init__(self, cfg: "ModelConfig") -> None:
        super().__init__()
        self.d_model = cfg.d_model
        self.lambda_head: LambdaHead | None = None  # the log-linear mixers' level weights

    @classmethod
    def check_config(cls, cfg: "ModelConfig") -> None:
        """Raise a ValueError naming the field when `cfg` cannot build this mixer."""

    def forward(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def init_cache(self, batch_size: int, max_len: int, *, device: torch.device, dtype: torch.dtype) -> Any:
        raise NotImplementedError

    def step(self, x_t: Tensor, cache: Any) -> tuple[Tensor, Any]:
        raise NotImplementedError

    def lambda_parameter_count(self) -> int:
        """Parameters of the lambda head, projection columns included (0 for a base mixer)."""
        return lambda_parameter_count(self.lambda_head, self.d_model)

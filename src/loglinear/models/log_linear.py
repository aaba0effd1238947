"""The log-linear mixers: a base mixer plus a lambda head, nothing else.

Guo et al. 2026, section "Log-Linear Variants of Mamba-2 and Gated DeltaNet".

Each is its base class built with a `LambdaHead` (lambda_params.py): the head projects the mixer's
input with its own heads x levels projection (the official code fuses it into the input projection:
the same function) and its level weights replace the base's single state (lam=None) in the operator
call. With lambda_param="constant" the head has no parameters and the mixer computes exactly its base
(same state_dict keys and shapes; at the same seed the same values, init.py).

Log-linear Gated DeltaNet follows the official code in one more point (`ModelConfig.scale_lambda`,
on by default): its lambda is divided by the q scale K^-0.5, i.e. multiplied by sqrt(K). Its
`ScaledLambdaHead` does only that; with the constant parameterisation it is then not its base.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from loglinear.models.gated_deltanet import GatedDeltaNet
from loglinear.models.lambda_params import LambdaHead
from loglinear.models.mamba2 import Mamba2

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig


class LogLinearMamba2(Mamba2):
    """Mamba-2 whose state is the Fenwick hierarchy of num_levels(max_len) levels, read with lambda_t^(l) per head."""

    name, display_name, base, log_linear = "log_linear_mamba2", "Log-Linear Mamba-2", Mamba2.name, True

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, lambda_head=LambdaHead.from_config(cfg, self.num_heads(cfg)))


class LogLinearGatedDeltaNet(GatedDeltaNet):
    """Gated DeltaNet whose state is the Fenwick hierarchy of num_levels(max_len) levels, read with
    lambda_t^(l) per head."""

    name, display_name, base, log_linear = (
        "log_linear_gated_deltanet",
        "Log-Linear Gated DeltaNet",
        GatedDeltaNet.name,
        True,
    )

    def __init__(self, cfg: ModelConfig) -> None:
        if cfg.scale_lambda:
            head = ScaledLambdaHead.from_config(cfg, self.num_heads(cfg))
            head.scale = self.head_key_dim(cfg) ** 0.5  # 1 / (the q scale K^-0.5)
        else:
            head = LambdaHead.from_config(cfg, self.num_heads(cfg))
        super().__init__(cfg, lambda_head=head)


class ScaledLambdaHead(LambdaHead):
    """A LambdaHead whose level weights are multiplied by a constant `scale` (same parameters, same state_dict)."""

    scale: float = 1.0

    def forward(self, x: Tensor, like: Tensor) -> Tensor:
        return super().forward(x, like) * self.scale

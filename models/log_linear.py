"""The log-linear mixers: a base mixer plus a lambda head, nothing else.

Guo et al. 2026, section "Log-Linear Variants of Mamba-2 and Gated DeltaNet".

Each is its base class built with a `LambdaHead` (lambda_params.py): the head's heads x levels
columns join the base's fused input projection and its level weights replace the base's single
state (lam=None) in the operator call. With lambda_param="constant" the head has no parameters
and the mixer computes exactly its base (same state_dict keys and shapes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loglinear.models.gated_deltanet import GatedDeltaNet
from loglinear.models.lambda_params import LambdaHead
from loglinear.models.mamba2 import Mamba2
from loglinear.models.mixer import MIXERS

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig


@MIXERS.register("log_linear_mamba2")
class LogLinearMamba2(Mamba2):
    """Mamba-2 whose state is the Fenwick hierarchy of num_levels(max_len) levels, read with lambda_t^(l) per head."""

    def __init__(self, cfg: "ModelConfig") -> None:
        super().__init__(cfg, lambda_head=LambdaHead.from_config(cfg, cfg.mamba2_heads))


@MIXERS.register("log_linear_gated_deltanet")
class LogLinearGatedDeltaNet(GatedDeltaNet):
    """Gated DeltaNet whose state is the Fenwick hierarchy of num_levels(max_len) levels, read with lambda_t^(l) per head."""

    def __init__(self, cfg: "ModelConfig") -> None:
        super().__init__(cfg, lambda_head=LambdaHead.from_config(cfg, cfg.heads))

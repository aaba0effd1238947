"""The log-linear mixers: a base mixer plus a lambda head, nothing else.

Guo et al. 2026, section "Log-Linear Variants of Mamba-2 and Gated DeltaNet"; the same recipe lifts the other
bases whose transition is a scalar decay (linear attention: none; RetNet: a fixed one per head) or the delta rule
(DeltaNet), as the paper's framework (its Table 1) describes and neither the paper nor fla implements.

Each is its base class built with a `LambdaHead` (lambda_params.py): the head projects the mixer's
input with its own heads x levels projection (the official code fuses it into the input projection:
the same function) and its level weights replace the base's single state (lam=None) in the operator
call. With lambda_param="constant" the head has no parameters and the mixer computes exactly its base
(same state_dict keys and shapes; at the same seed the same values, init.py).

Under `ModelConfig.init=authors` each starts as the authors' model of it (`init_rules`), which differs from
their base's start in A and the output projection's scale (docs/runs.md, "The authors' initialisation").

The log-linear variants of linear attention, RetNet and DeltaNet have no authors' code: each is its base with the
default lambda head, no lambda scale, and no `init=authors` start of its own (`authors_init` None).

Log-linear Gated DeltaNet follows the official code in one more point (`ModelConfig.scale_lambda`,
on by default): its lambda is divided by the q scale K^-0.5, i.e. multiplied by sqrt(K). Its
`ScaledLambdaHead` does only that; with the constant parameterisation it is then not its base.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from torch import Tensor

from loglinear.models.deltanet import DeltaNet
from loglinear.models.gated_deltanet import GatedDeltaNet
from loglinear.models.lambda_params import LambdaHead
from loglinear.models.linear_attention import LinearAttention
from loglinear.models.linear_mixer import MixerInit
from loglinear.models.mamba2 import Mamba2
from loglinear.models.retnet import RetNet

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig


class LogLinearMamba2(Mamba2):
    """Mamba-2 whose state is the Fenwick hierarchy of num_levels(max_len) levels, read with lambda_t^(l) per head."""

    name, display_name, base, log_linear = "log_linear_mamba2", "Log-Linear Mamba-2", Mamba2.name, True
    authors_init = (
        "fla/models/log_linear_mamba2/modeling_log_linear_mamba2.py, LogLinearMamba2PreTrainedModel._init_weights"
    )

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, lambda_head=LambdaHead.from_config(cfg, self.num_heads(cfg)))

    @classmethod
    def init_rules(cls, cfg: ModelConfig) -> MixerInit:
        """`init=authors`: fla 0.6.0's LogLinearMamba2 model (the source in `authors_init`) differs from its
        Mamba2 model in two rules: A = 1, 2, ..., H (torch.arange), and the output projection divided by
        sqrt(2 * n_layers) (num_residuals_per_layer 2). Its lambda scale L starts at 1 and the lambda columns of
        its input projection N(0, 0.02^2), as the suite's softplus head does by default."""
        rules = super().init_rules(cfg)
        if cfg.init == "authors":
            return dataclasses.replace(rules, A_rule="arange", out_proj_gain=(2 * cfg.n_layers) ** -0.5)
        return rules


class LogLinearGatedDeltaNet(GatedDeltaNet):
    """Gated DeltaNet whose state is the Fenwick hierarchy of num_levels(max_len) levels, read with
    lambda_t^(l) per head."""

    name, display_name, base, log_linear = (
        "log_linear_gated_deltanet",
        "Log-Linear Gated DeltaNet",
        GatedDeltaNet.name,
        True,
    )
    authors_init = "official code: hattention/modeling_h_gated_deltanet.py, HGatedDeltaNetPreTrainedModel._init_weights"

    @classmethod
    def init_rules(cls, cfg: ModelConfig) -> MixerInit:
        """`init=authors`: the official log-linear Gated DeltaNet (its layer is fla's GatedDeltaNet plus a lambda
        head; the source in `authors_init`) starts as fla 0.6.0's GatedDeltaNet model but for its output
        projection: U(+-1/sqrt(H * V)) (kaiming_uniform_ with a = sqrt(5)) divided by sqrt(2 * n_layers)
        (prenorm_residual_strategy "rescale", num_residuals_per_layer 2). Its L starts at 1 and its l_proj
        N(0, 0.02^2), as the suite's softplus head does by default."""
        rules = super().init_rules(cfg)
        if cfg.init == "authors":
            return dataclasses.replace(rules, out_proj="fan_in_uniform", out_proj_gain=(2 * cfg.n_layers) ** -0.5)
        return rules

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


class _WithLambdaHead:
    """A base mixer built with the suite's lambda head (no scale, nothing else changed)."""

    authors_init = None  # no authors' code: init=authors refuses it

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, lambda_head=LambdaHead.from_config(cfg, self.num_heads(cfg)))  # type: ignore[call-arg]


class LogLinearLinearAttention(_WithLambdaHead, LinearAttention):
    """Linear attention whose state is the Fenwick hierarchy, read with lambda_t^(l) per head: with no decay, the
    hierarchy only reweights the blocks of the past (lambda = 1 is linear attention)."""

    name, display_name, base, log_linear = (
        "log_linear_linear_attention", "Log-Linear Linear Attention", LinearAttention.name, True,
    )


class LogLinearRetNet(_WithLambdaHead, RetNet):
    """RetNet whose state is the Fenwick hierarchy, read with lambda_t^(l) per head: the fixed decay gamma_h^(t-s)
    then times a data-dependent weight per level."""

    name, display_name, base, log_linear = "log_linear_retnet", "Log-Linear RetNet", RetNet.name, True


class LogLinearDeltaNet(_WithLambdaHead, DeltaNet):
    """DeltaNet whose state is the Fenwick hierarchy, read with lambda_t^(l) per head: the delta rule within each
    level's block of keys, as log-linear Gated DeltaNet without the decay."""

    name, display_name, base, log_linear = "log_linear_deltanet", "Log-Linear DeltaNet", DeltaNet.name, True

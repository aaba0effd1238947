"""DeltaNet (Schlag, Irie & Schmidhuber 2021; Yang et al. 2024, "Parallelizing Linear Transformers with the Delta
Rule over Sequence Length") through the log-linear operator: the delta rule without a decay."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from loglinear.models.lambda_params import LambdaHead
from loglinear.models.layers import InitLinear, RMSNorm
from loglinear.models.linear_mixer import LinearAttentionMixer, MixerInit, OperatorInputs
from loglinear.models.mixer_fields import check_heads, default_heads

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig

L2_EPS = 1e-6


def l2_normalise(x: Tensor) -> Tensor:
    """x / sqrt(sum(x^2) + eps) over the last axis."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + L2_EPS)


class DeltaRuleHeads:
    """The heads of the delta-rule mixers (DeltaNet, Gated DeltaNet): `deltanet_heads` of key dim `deltanet_key_dim`
    (ModelConfig's Gated DeltaNet fields, mixer_fields.py)."""

    @classmethod
    def num_heads(cls, cfg: ModelConfig) -> int:
        """deltanet_heads, or `default_heads(d_model)`: the paper's MQAR setting (2 heads, 1 at d_model 16), head
        dim 128 at scale."""
        return cfg.deltanet_heads if cfg.deltanet_heads is not None else default_heads(cfg.d_model)

    @classmethod
    def head_key_dim(cls, cfg: ModelConfig) -> int:
        """deltanet_key_dim, or d_model / heads."""
        return cfg.deltanet_key_dim or cfg.d_model // cls.num_heads(cfg)

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        check_heads(cfg.d_model, cls.num_heads(cfg), "deltanet_heads")


class DeltaNet(DeltaRuleHeads, LinearAttentionMixer):
    """DeltaNet mixer: H heads of key dim K (deltanet_key_dim, or d_model / H), value dim V = expand * d_model / H.

        [q k v | b] = W_in x;   q, k, v <- silu(shortconv(q, k, v))
        q = l2norm(q) / sqrt(K),  k = l2norm(k),  beta = sigmoid(b)   (2 sigmoid(b) with negative eigenvalues)
        S_t = S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,   o_t = S_t q_t        (g = 0: no decay)
        out = W_out rmsnorm(o)   (per head)

    flash-linear-attention's DeltaNet layer with its defaults (silu and l2 norm on q and k, beta, short convolutions
    without bias, no output gate); its separate projections and convolutions fused into one each (the same function).
    A `lambda_head` (log_linear_deltanet) projects x with its own W_lambda.
    """

    name, display_name = "deltanet", "DeltaNet"
    size_fields = LinearAttentionMixer.size_fields | {"deltanet_heads", "deltanet_key_dim"}
    init_fields = frozenset()  # no decay, so none of the init options applies
    authors_init = "fla/models/modeling_utils.py, FLAPreTrainedModel._init_weights (DeltaNetForCausalLM)"

    def __init__(self, cfg: ModelConfig, lambda_head: LambdaHead | None = None) -> None:
        H = self.num_heads(cfg)
        K, V = self.head_key_dim(cfg), cfg.expand * cfg.d_model // H
        super().__init__(
            cfg, n_heads=H, key_dim=K, value_dim=V, conv_width=2 * H * K + H * V, rest_widths=[H], conv_bias=False,
            signed_decay=False, lambda_head=lambda_head,
        )
        self.beta_max = 2.0 if cfg.negative_eigenvalues else 1.0
        self.norm = RMSNorm(V, cfg.norm_eps)
        self.out_proj = InitLinear(H * V, cfg.d_model, rule=self.init_rule.out_proj)

    @classmethod
    def init_rules(cls, cfg: ModelConfig) -> MixerInit:
        """`init=default`: every projection N(0, 0.02^2), the convolution U(+-1/sqrt(conv_size)), as Gated DeltaNet's.
        `init=authors`: fla 0.6.0's DeltaNet model (the source in `authors_init`): the convolution's weight
        N(0, 0.02^2) too (nn.Conv1d drawn as its linear layers, no output-projection rescaling)."""
        return MixerInit(conv_weight="normal") if cfg.init == "authors" else MixerInit()

    def operator_inputs(self, conv_out: Tensor, rest: list[Tensor]) -> OperatorInputs:
        H, K, V = self.n_heads, self.key_dim, self.value_dim
        q, k, v = conv_out.split([H * K, H * K, H * V], dim=-1)
        beta = self.beta_max * torch.sigmoid(rest[0])
        return OperatorInputs(
            q=l2_normalise(q.unflatten(-1, (H, K))) * K**-0.5,
            k=l2_normalise(k.unflatten(-1, (H, K))),
            v=v.unflatten(-1, (H, V)),
            g=torch.zeros_like(beta),
            beta=beta,
        )

    def output(self, o: Tensor, conv_out: Tensor, rest: list[Tensor]) -> Tensor:
        return self.out_proj(self.norm(o).flatten(-2))

"""Linear attention (Katharopoulos et al. 2020) through the log-linear operator: no decay, no delta rule."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from loglinear.models.lambda_params import LambdaHead
from loglinear.models.layers import InitLinear, RMSNorm
from loglinear.models.linear_mixer import LinearAttentionMixer, MixerInit, OperatorInputs
from loglinear.models.mixer_fields import check_heads, default_heads

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig


class HadamardFeatureMap(nn.Module):
    """phi(x) = (W_1 x + b_1) * (W_2 x + b_2) over a head's last axis (fla's "elementwise_product" feature map:
    the same two maps for every head)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer1(x) * self.layer2(x)


class LinearAttention(LinearAttentionMixer):
    """Linear attention: H heads of key dim K = d_model / H and value dim V = expand * d_model / H.

        [q k v] = W_in x;   q <- phi_q(q),  k <- phi_k(k)   (per head, HadamardFeatureMap)
        S_t = S_{t-1} + v_t k_t^T,   o_t = S_t q_t / sqrt(K)        (g = 0: no decay; unnormalised)
        out = W_out rmsnorm(o)   (per head)

    flash-linear-attention's LinearAttention layer with its defaults (feature map "elementwise_product", untied
    between q and k; no normalisation by the feature map's sum; an RMSNorm per head on the output; no short
    convolution); its three projections fused into one (the same function). A `lambda_head`
    (log_linear_linear_attention) projects x with its own W_lambda.
    """

    name, display_name = "linear_attention", "Linear Attention"
    transitions = False  # the state never decays: `model.negative_eigenvalues` has nothing to change
    size_fields = frozenset({"expand", "linear_attention_heads"})
    init_fields = frozenset()
    authors_init = "fla/models/modeling_utils.py, FLAPreTrainedModel._init_weights (LinearAttentionForCausalLM)"

    def __init__(self, cfg: ModelConfig, lambda_head: LambdaHead | None = None) -> None:
        H = self.num_heads(cfg)
        K, V = cfg.d_model // H, cfg.expand * cfg.d_model // H
        super().__init__(
            cfg, n_heads=H, key_dim=K, value_dim=V, conv_width=2 * H * K + H * V, rest_widths=[], conv_bias=False,
            signed_decay=False, lambda_head=lambda_head, short_conv=False,
        )
        self.feature_map_q, self.feature_map_k = HadamardFeatureMap(K), HadamardFeatureMap(K)
        self.norm = RMSNorm(V, cfg.norm_eps)
        self.out_proj = InitLinear(H * V, cfg.d_model)

    @classmethod
    def init_rules(cls, cfg: ModelConfig) -> MixerInit:
        """Under either `init`, every weight N(0, 0.02^2) and every bias 0 (the feature maps' too): fla 0.6.0's
        LinearAttention model (the source in `authors_init`), which has no convolution and rescales nothing."""
        return MixerInit()

    @classmethod
    def num_heads(cls, cfg: ModelConfig) -> int:
        """linear_attention_heads, or `default_heads(d_model)`."""
        heads = cfg.linear_attention_heads
        return heads if heads is not None else default_heads(cfg.d_model)

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        check_heads(cfg.d_model, cls.num_heads(cfg), "linear_attention_heads")

    def operator_inputs(self, conv_out: Tensor, rest: list[Tensor]) -> OperatorInputs:
        H, K, V = self.n_heads, self.key_dim, self.value_dim
        q, k, v = conv_out.split([H * K, H * K, H * V], dim=-1)
        v = v.unflatten(-1, (H, V))
        return OperatorInputs(
            q=self.feature_map_q(q.unflatten(-1, (H, K))) * K**-0.5,
            k=self.feature_map_k(k.unflatten(-1, (H, K))),
            v=v,
            g=torch.zeros_like(v[..., 0]),
        )

    def output(self, o: Tensor, conv_out: Tensor, rest: list[Tensor]) -> Tensor:
        return self.out_proj(self.norm(o).flatten(-2))

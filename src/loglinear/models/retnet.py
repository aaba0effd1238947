"""RetNet's multi-scale retention (Sun et al. 2023, "Retentive Network") through the log-linear operator: a fixed
decay per head."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from loglinear.models.lambda_params import LambdaHead
from loglinear.models.layers import GatedRMSNorm, InitLinear, apply_rope
from loglinear.models.linear_mixer import LinearAttentionMixer, MixerInit, OperatorInputs
from loglinear.models.mixer_fields import check_heads, default_heads

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig

ROPE_BASE = 10000.0
"""The rotary base of flash-linear-attention's retention layer (its RotaryEmbedding's default)."""


def retention_log_decay(n_heads: int, *, dtype: torch.dtype, device: torch.device) -> Tensor:
    """log gamma_h with gamma_h = 1 - 2^(-5 - h), h = 0 .. n_heads - 1: RetNet's decays (exact in binary)."""
    return torch.log1p(-torch.exp2(-5.0 - torch.arange(n_heads, dtype=dtype, device=device)))


class RetNet(LinearAttentionMixer):
    """Multi-scale retention: H heads of key dim K = d_model / H (even) and value dim V = expand * d_model / H.

        [q k v | gate] = W_in x;   q, k <- RoPE(q, k) at each token's position
        S_t = gamma_h S_{t-1} + v_t k_t^T,   o_t = S_t q_t / sqrt(K)      gamma_h = 1 - 2^(-5 - h), fixed
        out = W_out (rmsnorm(o) * silu(gate))   (per head)

    flash-linear-attention's MultiScaleRetention layer with its defaults (no feature map, no short convolution,
    the output gate with swish through its fused gated RMSNorm); its projections fused into one (the same
    function). A `lambda_head` (log_linear_retnet) projects x with its own W_lambda.
    """

    name, display_name = "retnet", "RetNet"
    transitions = False  # the decays are fixed in (0, 1): `model.negative_eigenvalues` has nothing to change
    size_fields = frozenset({"expand", "retnet_heads"})
    init_fields = frozenset()
    authors_init = "fla/models/modeling_utils.py, FLAPreTrainedModel._init_weights (RetNetForCausalLM)"

    def __init__(self, cfg: ModelConfig, lambda_head: LambdaHead | None = None) -> None:
        H = self.num_heads(cfg)
        K, V = cfg.d_model // H, cfg.expand * cfg.d_model // H
        super().__init__(
            cfg, n_heads=H, key_dim=K, value_dim=V, conv_width=2 * H * K + H * V, rest_widths=[H * V],
            conv_bias=False, signed_decay=False, lambda_head=lambda_head, short_conv=False,
        )
        self.norm = GatedRMSNorm(V, cfg.norm_eps, norm_before_gate=True)
        self.out_proj = InitLinear(H * V, cfg.d_model)

    @classmethod
    def init_rules(cls, cfg: ModelConfig) -> MixerInit:
        """Under either `init`, every projection N(0, 0.02^2): fla 0.6.0's RetNet model (the source in
        `authors_init`), which has no convolution (its default) and rescales nothing."""
        return MixerInit()

    @classmethod
    def num_heads(cls, cfg: ModelConfig) -> int:
        """retnet_heads, or `default_heads(d_model)`."""
        return cfg.retnet_heads if cfg.retnet_heads is not None else default_heads(cfg.d_model)

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        check_heads(cfg.d_model, cls.num_heads(cfg), "retnet_heads", even_for="RetNet's rotary embedding")

    def operator_inputs(self, conv_out: Tensor, rest: list[Tensor]) -> OperatorInputs:
        H, K, V = self.n_heads, self.key_dim, self.value_dim
        q, k, v = conv_out.split([H * K, H * K, H * V], dim=-1)
        v = v.unflatten(-1, (H, V))
        g = retention_log_decay(H, dtype=v.dtype, device=v.device).expand(v.shape[:-1])
        return OperatorInputs(q=q.unflatten(-1, (H, K)) * K**-0.5, k=k.unflatten(-1, (H, K)), v=v, g=g)

    def positioned(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return apply_rope(q, positions, ROPE_BASE), apply_rope(k, positions, ROPE_BASE)

    def output(self, o: Tensor, conv_out: Tensor, rest: list[Tensor]) -> Tensor:
        return self.out_proj(self.norm(o, rest[0].unflatten(-1, o.shape[-2:])).flatten(-2))

"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks") through the log-linear operator."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loglinear.models.decay_init import initial_A_log, initial_dt_bias
from loglinear.models.lambda_params import LambdaHead
from loglinear.models.layers import GatedRMSNorm, RMSNorm
from loglinear.models.linear_mixer import LinearAttentionMixer, OperatorInputs

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig

L2_EPS = 1e-6


def l2_normalise(x: Tensor) -> Tensor:
    """x / sqrt(sum(x^2) + eps) over the last axis."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + L2_EPS)


class GatedDeltaNet(LinearAttentionMixer):
    """Gated DeltaNet mixer: H heads of key dim K (deltanet_key_dim, or d_model / H) and value dim
    V = expand * d_model / H.

        [q k v | a | b | gate] = W_in x;   q, k, v <- silu(shortconv(q, k, v))
        q = l2norm(q) / sqrt(K),  k = l2norm(k),  beta = sigmoid(b)   (2 sigmoid(b) with negative eigenvalues)
        g = -exp(A_log) * softplus(a + dt_bias)                        log of the decay alpha
        S_t = S_{t-1} alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,   o_t = S_t q_t
        out = W_out (rmsnorm(o) * silu(gate))   (plain per-head rmsnorm without the output gate)

    beta in (0, 2) gives the transition eigenvalue 1 - beta in (-1, 1) along k (Grazzi et al. 2025).
    The projections of fla's layer are fused into one W_in (same function, one matmul), and q, k,
    v share one depthwise convolution (equal to three). A `lambda_head` projects x with its own W_lambda.
    """

    name, display_name = "gated_deltanet", "Gated DeltaNet"
    size_fields = LinearAttentionMixer.size_fields | {"deltanet_heads", "deltanet_key_dim"}

    def __init__(self, cfg: ModelConfig, lambda_head: LambdaHead | None = None) -> None:
        H = self.num_heads(cfg)
        K, V = self.head_key_dim(cfg), cfg.expand * cfg.d_model // H
        self.use_output_gate = cfg.use_output_gate
        super().__init__(
            cfg, n_heads=H, key_dim=K, value_dim=V, conv_width=2 * H * K + H * V,
            rest_widths=[H, H, H * V if cfg.use_output_gate else 0], conv_bias=False, signed_decay=False,
            lambda_head=lambda_head,
        )
        self.beta_max = 2.0 if cfg.negative_eigenvalues else 1.0
        self.dt_init_max = cfg.dt_init_max
        self.A_log, self.dt_bias = nn.Parameter(torch.empty(H)), nn.Parameter(torch.empty(H))
        self.init_parameters()
        self.norm = (
            GatedRMSNorm(V, cfg.norm_eps, norm_before_gate=True) if cfg.use_output_gate else RMSNorm(V, cfg.norm_eps)
        )
        self.out_proj = nn.Linear(H * V, cfg.d_model, bias=False)

    def init_parameters(self, generator: torch.Generator | None = None) -> None:
        """The mixer's own parameters (its submodules have their own): A_log and dt_bias as in Mamba-2."""
        with torch.no_grad():
            self.A_log.copy_(initial_A_log(self.n_heads, generator))
            self.dt_bias.copy_(initial_dt_bias(self.n_heads, self.dt_init_max, generator))

    @classmethod
    def num_heads(cls, cfg: ModelConfig) -> int:
        """deltanet_heads, or 1 at d_model <= 16, else max(2, d_model // 128): the paper's MQAR setting
        (2 heads, 1 at d_model 16), head dim 128 at scale."""
        if cfg.deltanet_heads is not None:
            return cfg.deltanet_heads
        return 1 if cfg.d_model <= 16 else max(2, cfg.d_model // 128)

    @classmethod
    def head_key_dim(cls, cfg: ModelConfig) -> int:
        """deltanet_key_dim, or d_model / heads."""
        return cfg.deltanet_key_dim or cfg.d_model // cls.num_heads(cfg)

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        heads = cls.num_heads(cfg)
        if cfg.d_model % heads:
            raise ValueError(f"ModelConfig.d_model={cfg.d_model} is not divisible by deltanet_heads={heads}")

    def operator_inputs(self, conv_out: Tensor, rest: list[Tensor]) -> OperatorInputs:
        H, K, V = self.n_heads, self.key_dim, self.value_dim
        q, k, v = conv_out.split([H * K, H * K, H * V], dim=-1)
        a, b, _ = rest
        return OperatorInputs(
            q=l2_normalise(q.unflatten(-1, (H, K))) * K**-0.5,
            k=l2_normalise(k.unflatten(-1, (H, K))),
            v=v.unflatten(-1, (H, V)),
            g=-torch.exp(self.A_log) * F.softplus(a + self.dt_bias),
            beta=self.beta_max * torch.sigmoid(b),
        )

    def output(self, o: Tensor, conv_out: Tensor, rest: list[Tensor]) -> Tensor:
        y = self.norm(o, rest[2].unflatten(-1, o.shape[-2:])) if self.use_output_gate else self.norm(o)
        return self.out_proj(y.flatten(-2))

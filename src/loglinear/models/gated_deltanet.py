"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks") through the log-linear operator."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loglinear.models.decay_init import initial_A_log, initial_dt_bias
from loglinear.models.deltanet import DeltaRuleHeads, l2_normalise
from loglinear.models.lambda_params import LambdaHead
from loglinear.models.layers import GatedRMSNorm, InitLinear, RMSNorm
from loglinear.models.linear_mixer import LinearAttentionMixer, MixerInit, OperatorInputs

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig


class GatedDeltaNet(DeltaRuleHeads, LinearAttentionMixer):
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
    init_fields = frozenset({"dt_init_max"})  # A, the projections and the convolution keep their own rules
    authors_init = "fla/models/gated_deltanet/modeling_gated_deltanet.py, GatedDeltaNetPreTrainedModel._init_weights"

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
        self.A_log, self.dt_bias = nn.Parameter(torch.empty(H)), nn.Parameter(torch.empty(H))
        self.init_parameters()
        self.norm = (
            GatedRMSNorm(V, cfg.norm_eps, norm_before_gate=True) if cfg.use_output_gate else RMSNorm(V, cfg.norm_eps)
        )
        init = self.init_rule
        self.out_proj = InitLinear(H * V, cfg.d_model, rule=init.out_proj, gain=init.out_proj_gain)

    @classmethod
    def init_rules(cls, cfg: ModelConfig) -> MixerInit:
        """`init=default`: A uniform in [1, 16] and dt as in Mamba-2 (`dt_init_max`), every projection
        N(0, 0.02^2), the convolution U(+-1/sqrt(conv_size)). `init=authors`: fla 0.6.0's GatedDeltaNet model (the
        source in `authors_init`): A uniform in [0, 16], the convolutions' weights N(0, 0.02^2) (nn.Conv1d drawn
        as its linear layers); its output projection stays N(0, 0.02^2) (prenorm_residual_strategy None there)."""
        if cfg.init == "authors":
            return MixerInit(A_range=(0.0, 16.0), conv_weight="normal")
        return MixerInit(dt_max=cfg.dt_init_max)

    def init_parameters(self, generator: torch.Generator | None = None) -> None:
        """The mixer's own parameters (its submodules have their own): A_log and dt_bias as in Mamba-2."""
        init = self.init_rule
        with torch.no_grad():
            self.A_log.copy_(initial_A_log(self.n_heads, generator, rule=init.A_rule, a_range=init.A_range))
            self.dt_bias.copy_(initial_dt_bias(self.n_heads, init.dt_max, generator))

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

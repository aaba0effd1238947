"""Mamba-2 (Dao & Gu 2024, "Transformers are SSMs"), one group, through the log-linear operator's linear case."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loglinear.models.decay_init import initial_A_log, initial_dt_bias
from loglinear.models.lambda_params import LambdaHead
from loglinear.models.layers import GatedRMSNorm, InitLinear
from loglinear.models.linear_mixer import LinearAttentionMixer, MixerInit, OperatorInputs
from loglinear.models.signed_decay import signed_log_decay

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig

class Mamba2(LinearAttentionMixer):
    """Mamba-2 mixer with d_inner = expand * d_model, H = d_inner / head_dim heads, state dim N.

        [x B C | z | dt] = W_in u;   x, B, C <- silu(shortconv(x, B, C))
        dt = softplus(dt + dt_bias);  A = -exp(A_log);  decay alpha = exp(dt * A)
        h_t = alpha_t h_{t-1} + (dt_t x_t) B_t^T,   y_t = h_t C_t + D x_t   (per head; B, C shared by heads)
        out = W_out rmsnorm(y * silu(z))

    The recurrence is the operator with q = C, k = B, v = x * dt, g = dt * A (docs/operator.md). With
    `negative_eigenvalues` the decay is the signed alpha = 2 exp(dt * A) - 1 in (-1, 1] (see
    signed_decay.py). A `lambda_head` (log_linear_mamba2) computes dl from u with a projection of its own.
    The initial A, the projections' scales and the conv bias follow the config's init options, or the authors'
    rules (`init_rules`, docs/runs.md).
    """

    name, display_name = "mamba2", "Mamba-2"
    size_fields = LinearAttentionMixer.size_fields | {"head_dim", "state_dim"}
    authors_init = "fla/models/mamba2/modeling_mamba2.py, Mamba2PreTrainedModel._init_weights"

    def __init__(self, cfg: ModelConfig, lambda_head: LambdaHead | None = None) -> None:
        self.d_inner, H, N = cfg.expand * cfg.d_model, self.num_heads(cfg), cfg.state_dim
        super().__init__(
            cfg, n_heads=H, key_dim=N, value_dim=cfg.head_dim, conv_width=self.d_inner + 2 * N,
            rest_widths=[self.d_inner, H], conv_bias=True, signed_decay=cfg.negative_eigenvalues,
            lambda_head=lambda_head,
        )
        self.dt_bias, self.A_log, self.D = (nn.Parameter(torch.empty(H)) for _ in range(3))
        self.init_parameters()
        self.norm = GatedRMSNorm(self.d_inner, cfg.norm_eps, norm_before_gate=False)
        init = self.init_rule
        self.out_proj = InitLinear(self.d_inner, cfg.d_model, rule=init.out_proj, gain=init.out_proj_gain)

    @classmethod
    def init_rules(cls, cfg: ModelConfig) -> MixerInit:
        """`init=default`: the config's init options. `init=authors`: fla 0.6.0's Mamba2 model (the source in
        `authors_init`): A uniform in [1, 16] (its config's A_init_range), the convolution's weight N(0, 0.02^2)
        and bias 0 (nn.Conv1d drawn as its linear layers, initializer_range 0.02), the output projection
        U(+-1/sqrt(d_inner)) (kaiming_uniform_ with a = sqrt(5)) divided by sqrt(num_residuals_per_layer *
        n_layers) with num_residuals_per_layer 1; dt and the input projection as the defaults."""
        if cfg.init == "authors":
            return MixerInit(
                conv_weight="normal", conv_bias="zero", out_proj="fan_in_uniform", out_proj_gain=cfg.n_layers**-0.5
            )
        return MixerInit(
            A_rule=cfg.A_init, A_range=(cfg.A_init_min, cfg.A_init_max), dt_max=cfg.dt_init_max,
            in_proj_std=cfg.in_proj_std, conv_bias=cfg.conv_bias_init, out_proj=cfg.out_proj_init,
        )

    def init_parameters(self, generator: torch.Generator | None = None) -> None:
        """The mixer's own parameters (its submodules have their own): dt_bias as in Mamba-2, A_log by the
        init rule, D = 1."""
        init = self.init_rule
        with torch.no_grad():
            self.dt_bias.copy_(initial_dt_bias(self.n_heads, init.dt_max, generator))
            self.A_log.copy_(initial_A_log(self.n_heads, generator, rule=init.A_rule, a_range=init.A_range))
            self.D.fill_(1.0)

    @classmethod
    def num_heads(cls, cfg: ModelConfig) -> int:
        return cfg.expand * cfg.d_model // cfg.head_dim

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        d_inner = cfg.expand * cfg.d_model
        if d_inner % cfg.head_dim:
            raise ValueError(
                f"ModelConfig.head_dim={cfg.head_dim} must divide expand * d_model = {d_inner} (Mamba-2 heads)"
            )

    def operator_inputs(self, conv_out: Tensor, rest: list[Tensor]) -> OperatorInputs:
        x, B, C = conv_out.split([self.d_inner, self.key_dim, self.key_dim], dim=-1)
        dt = F.softplus(rest[1] + self.dt_bias)  # (..., H)
        a = -torch.exp(self.A_log) * dt  # log of the unsigned decay, <= 0
        g, sign = signed_log_decay(a) if self.signed_decay else (a, None)
        v = x.unflatten(-1, (self.n_heads, self.value_dim)) * dt[..., None]
        # B and C are shared by all heads: one q/k head (GQA), which the fused kernels read without copies
        return OperatorInputs(q=C.unsqueeze(-2), k=B.unsqueeze(-2), v=v, g=g, sign=sign)

    def output(self, o: Tensor, conv_out: Tensor, rest: list[Tensor]) -> Tensor:
        x = conv_out[..., : self.d_inner].unflatten(-1, (self.n_heads, self.value_dim))
        y = o + self.D[:, None] * x
        return self.out_proj(self.norm(y.flatten(-2), rest[0]))

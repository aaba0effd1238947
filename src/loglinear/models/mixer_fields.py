"""The `ModelConfig` fields that one mixer reads and the others ignore, declared by mixer. `ModelConfig` is built
from these groups and its own fields, and its keys stay flat (`model.head_dim`), so a group is no level of a
config; each field's place in a run's identity is declared with it (loglinear/identity.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from loglinear.identity import ADDED
from loglinear.models.decay_init import A_RANGE
from loglinear.models.init import INIT_STD


@dataclass
class AttentionFields:
    """Read by attention (attention.py) only.

    attention_heads:  heads; None: max(1, d_model // 64) (head dim 64, one head below 128).
    rope_base:        RoPE base.
    """

    attention_heads: int | None = None
    rope_base: float = 10000.0


@dataclass
class Mamba2Fields:
    """Read by Mamba-2 and log-linear Mamba-2 (mamba2.py) only.

    head_dim:         head dim P: heads = expand * d_model / head_dim (attention and Gated DeltaNet use
                      d_model / heads).
    state_dim:        state dim N (the operator's key dim).
    A_init:           initial decay rates A = exp(A_log) per head (A_INITS): "uniform" in
                      [A_init_min, A_init_max] (mamba_ssm's Mamba2: [1, 16]); "arange": A = 1, 2, ..., H
                      (Hugging Face transformers' Mamba2Mixer, S4D-Real's rule over the heads).
    A_init_min, A_init_max: the range of the "uniform" rule.
    in_proj_std:      the input projection starts as N(0, in_proj_std^2) (0.02: zoology's rule for every linear
                      layer; transformers' Mamba-2 uses its initializer_range, 0.1).
    out_proj_init:    the output projection (LINEAR_INITS): "normal" N(0, 0.02^2) (zoology's rule);
                      "fan_in_uniform" U(+-1/sqrt(d_inner)) (PyTorch's nn.Linear default, transformers;
                      mamba_ssm's full model then divides it by sqrt(n_layers)).
    conv_bias_init:   the short-convolution bias (CONV_BIAS_INITS): "uniform" U(+-1/sqrt(conv_size))
                      (nn.Conv1d's default, as in mamba_ssm); "zero" (transformers).
    The init options (all but head_dim and state_dim) were added after runs were made: each is left out of a run's
    id at its default.
    """

    head_dim: int = 16
    state_dim: int = 16
    A_init: str = field(default="uniform", metadata=ADDED)
    A_init_min: float = field(default=A_RANGE[0], metadata=ADDED)
    A_init_max: float = field(default=A_RANGE[1], metadata=ADDED)
    in_proj_std: float = field(default=INIT_STD, metadata=ADDED)
    out_proj_init: str = field(default="normal", metadata=ADDED)
    conv_bias_init: str = field(default="uniform", metadata=ADDED)


@dataclass
class GatedDeltaNetFields:
    """Read by Gated DeltaNet and log-linear Gated DeltaNet (gated_deltanet.py) only.

    deltanet_heads:   heads; None: 1 at d_model <= 16, else max(2, d_model // 128) (the paper's MQAR setting:
                      2 heads, 1 at d_model 16; head dim 128 at scale). Each mixer reads only its own head
                      count, so a preset that sets one cannot change another mixer; Mamba-2 has head_dim instead.
    deltanet_key_dim: key dim K of each head; None: d_model / heads. A larger K gives Gated DeltaNet a larger
                      state (H * K * V numbers) at the same d_model, as state_dim does Mamba-2 (the equal-state
                      arms of an MQAR study). Added after runs were made: left out of a run's id at its default.
    use_output_gate:  output gate (rmsnorm(o) * silu(W_g x)) instead of a plain norm.
    """

    deltanet_heads: int | None = None
    deltanet_key_dim: int | None = field(default=None, metadata=ADDED)
    use_output_gate: bool = True


@dataclass
class LogLinearFields:
    """Read by the log-linear mixers (log_linear.py, lambda_params.py) only.

    lambda_param:     a name in `LAMBDA_PARAMS`.
    lambda_bias_init: the lambda head's learned per-(head, level) bias b: "none" (no bias: the paper's head),
                      "zero" (b = 0), "ones" (lambda starts at 1 on every level, i.e. the model starts as its
                      base mixer; clipped into the range of bounded parameterisations), "decay" (lambda starts
                      at 2^-level, favouring recent tokens).
    lambda_share_from_level: None, or j >= 1: levels >= j share one lambda (tied parameters), so levels deeper
                      than the training length never go untrained (length generalisation). A run config may
                      say "trained" (SHARE_FROM_TRAINED): the run resolves it to the deepest level its longest
                      training sequence reaches (runs/config.py); a ModelConfig itself holds None or a level.
    scale_lambda:     log-linear Gated DeltaNet only: multiply lambda by sqrt(K), K its key head dim, as the
                      official code does (it divides lambda by the q scale K^-0.5, SCALE_LAMBDA in its
                      gated_delta_rule_apis.py); False: lambda as the head gives it.
    """

    lambda_param: str = "softplus"
    lambda_bias_init: str = "none"
    lambda_share_from_level: int | str | None = None
    scale_lambda: bool = True


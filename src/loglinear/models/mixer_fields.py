"""The `ModelConfig` fields that one mixer reads and the others ignore, declared by mixer. `ModelConfig` is built
from these groups and its own fields, and its keys stay flat (`model.head_dim`), so a group is no level of a
config; each field's place in a run's identity is declared with it (loglinear/identity.py), and each group checks
its own fields (`check_own`, called by `ModelConfig.validate`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from loglinear.checks import check_float, check_int
from loglinear.identity import ADDED
from loglinear.models.decay_init import A_INITS, A_RANGE
from loglinear.models.init import INIT_STD
from loglinear.models.layers import CONV_BIAS_INITS, LINEAR_INITS

LAMBDA_BIAS_INITS = ("none", "zero", "ones", "decay")
"""Level-bias options of the lambda head (see `lambda_bias_init`)."""

SHARE_FROM_TRAINED = "trained"
"""The `lambda_share_from_level` of a run config that the run resolves from its training length
(models/config.py, `share_from_for_training_length`)."""


def default_heads(d_model: int) -> int:
    """The head count of the linear-attention mixers (Gated DeltaNet, DeltaNet, linear attention, RetNet) when their
    config leaves it open: 1 at d_model <= 16, else max(2, d_model // 128), the paper's MQAR setting (2 heads, 1 at
    d_model 16) and head dim 128 at scale."""
    return 1 if d_model <= 16 else max(2, d_model // 128)


def check_heads(d_model: int, heads: int, field: str, *, even_for: str | None = None) -> None:
    """d_model splits into `heads` heads (ModelConfig.`field`); with `even_for` (what needs it), of an even dim."""
    if d_model % heads:
        raise ValueError(f"ModelConfig.d_model={d_model} is not divisible by {field}={heads}")
    if even_for is not None and (d_model // heads) % 2:
        raise ValueError(f"ModelConfig.{field}={heads} gives an odd head dim {d_model // heads}; {even_for} needs it "
                         "even")


def _check_option(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"ModelConfig.{name}: unknown option {value!r}; valid: {', '.join(valid)}")


def _check_optional_count(name: str, value: int | None) -> None:
    if value is not None:
        check_int(f"ModelConfig.{name}", value, minimum=1)


@dataclass
class AttentionFields:
    """Read by attention (attention.py) only.

    attention_heads:  heads; None: max(1, d_model // 64) (head dim 64, one head below 128).
    rope_base:        RoPE base.
    """

    attention_heads: int | None = None
    rope_base: float = 10000.0

    def check_own(self) -> None:
        check_float("ModelConfig.rope_base", self.rope_base, above=0)
        _check_optional_count("attention_heads", self.attention_heads)


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

    def check_own(self) -> None:
        for name in ("head_dim", "state_dim"):
            check_int(f"ModelConfig.{name}", getattr(self, name), minimum=1)
        _check_option("A_init", self.A_init, A_INITS)
        _check_option("out_proj_init", self.out_proj_init, LINEAR_INITS)
        _check_option("conv_bias_init", self.conv_bias_init, CONV_BIAS_INITS)
        for name in ("A_init_min", "A_init_max", "in_proj_std"):
            check_float(f"ModelConfig.{name}", getattr(self, name), above=0)
        if self.A_init_min > self.A_init_max:
            raise ValueError(
                f"ModelConfig.A_init_min={self.A_init_min} must be <= A_init_max={self.A_init_max} (the range of A)"
            )


@dataclass
class GatedDeltaNetFields:
    """Read by Gated DeltaNet, DeltaNet and their log-linear variants (gated_deltanet.py, deltanet.py) only;
    use_output_gate by the Gated DeltaNets only.

    deltanet_heads:   heads; None: `default_heads(d_model)` (the paper's MQAR setting: 2 heads, 1 at d_model 16;
                      head dim 128 at scale). Each mixer family reads only its own head count, so a preset that
                      sets one cannot change another family; Mamba-2 has head_dim instead.
    deltanet_key_dim: key dim K of each head; None: d_model / heads. A larger K gives a delta-rule mixer a larger
                      state (H * K * V numbers) at the same d_model, as state_dim does Mamba-2 (the equal-state
                      arms of an MQAR study). Added after runs were made: left out of a run's id at its default.
    use_output_gate:  Gated DeltaNet's output gate (rmsnorm(o) * silu(W_g x)) instead of a plain norm. DeltaNet
                      has none (flash-linear-attention's DeltaNet layer by default).
    """

    deltanet_heads: int | None = None
    deltanet_key_dim: int | None = field(default=None, metadata=ADDED)
    use_output_gate: bool = True

    def check_own(self) -> None:
        _check_optional_count("deltanet_heads", self.deltanet_heads)
        _check_optional_count("deltanet_key_dim", self.deltanet_key_dim)


@dataclass
class LinearAttentionFields:
    """Read by linear attention and log-linear linear attention (linear_attention.py) only.

    linear_attention_heads: heads; None: `default_heads(d_model)`. Key dim d_model / heads, value dim
                      expand * d_model / heads. Added after runs were made: left out of a run's id at its default.
    """

    linear_attention_heads: int | None = field(default=None, metadata=ADDED)

    def check_own(self) -> None:
        _check_optional_count("linear_attention_heads", self.linear_attention_heads)


@dataclass
class RetNetFields:
    """Read by RetNet and log-linear RetNet (retnet.py) only.

    retnet_heads:     heads; None: `default_heads(d_model)`. Key dim d_model / heads (even: rotary positions),
                      value dim expand * d_model / heads; head h decays by 1 - 2^(-5 - h). Added after runs were
                      made: left out of a run's id at its default.
    """

    retnet_heads: int | None = field(default=None, metadata=ADDED)

    def check_own(self) -> None:
        _check_optional_count("retnet_heads", self.retnet_heads)


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

    def check_own(self) -> None:
        _check_option("lambda_bias_init", self.lambda_bias_init, LAMBDA_BIAS_INITS)
        share = self.lambda_share_from_level
        if isinstance(share, str):
            raise ValueError(
                f"ModelConfig.lambda_share_from_level={share!r}: a model needs null or a level >= 1 "
                f"({SHARE_FROM_TRAINED!r} is for run configs, which resolve it from their training length)"
            )
        if share is not None:
            check_int("ModelConfig.lambda_share_from_level", share, minimum=1)

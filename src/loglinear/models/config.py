"""`ModelConfig`: every architecture choice of a language model, as an OmegaConf-compatible dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from loglinear.checks import check_float, check_int
from loglinear.identity import ADDED, EXCLUDED
from loglinear.kernels import IMPLS, num_levels
from loglinear.kernels.selfcheck import MODES as SELFCHECK_MODES
from loglinear.models.decay_init import DT_MIN
from loglinear.models.embeddings import INPUT_EMBEDDINGS
from loglinear.models.heads import OUTPUT_HEADS
from loglinear.models.init import INITS
from loglinear.models.mixer_fields import (
    SHARE_FROM_TRAINED,
    AttentionFields,
    GatedDeltaNetFields,
    LinearAttentionFields,
    LogLinearFields,
    Mamba2Fields,
    RetNetFields,
)

INIT_OPTIONS = ("dt_init_max", "A_init", "A_init_min", "A_init_max", "in_proj_std", "out_proj_init", "conv_bias_init")
"""The init options of `init=default`; `init=authors` has rules of its own for what they set."""


def share_from_for_training_length(train_len: int) -> int:
    """The level that `lambda_share_from_level: trained` stands for: the deepest level a training sequence of
    train_len tokens reaches, num_levels(train_len) - 1 (occupied at its last position).

    Levels past it are reached only by longer (test) sequences and would keep their initial lambda; tied to
    it, they read a lambda that training reaches. Below 2 tokens there is no level >= 1 to tie to.
    """
    level = num_levels(train_len) - 1
    if level < 1:
        raise ValueError(
            f"ModelConfig.lambda_share_from_level={SHARE_FROM_TRAINED}: training sequences of {train_len} "
            "token(s) reach level 0 only, so there is no trained level >= 1 to tie deeper ones to"
        )
    return level


@dataclass
class SharedFields:
    """The `ModelConfig` fields read by several mixers or the model around them (ModelConfig's docstring says what
    each does); a base of its own so that they come first in a written config, before each mixer's."""

    mixer: str = "attention"
    mixer_options: dict[str, Any] = field(default_factory=dict, metadata=ADDED)
    d_model: int = 64
    n_layers: int = 2
    vocab_size: int = 8192
    max_len: int = 2048
    expand: int = 2
    conv_size: int = 4
    mlp_ratio: float = 0.0
    tie_embeddings: bool = True
    output_head: str = field(default="lm", metadata=EXCLUDED)
    input_embedding: str = field(default="lookup", metadata=EXCLUDED)
    negative_eigenvalues: bool = False
    init: str = field(default="default", metadata=ADDED)
    dt_init_max: float = 0.1
    norm_eps: float = 1e-5
    impl: str = "auto"
    selfcheck: str | None = field(default=None, metadata=EXCLUDED)
    chunk_size: int = 64


@dataclass
class ModelConfig(
    LogLinearFields, RetNetFields, LinearAttentionFields, GatedDeltaNetFields, Mamba2Fields, AttentionFields,
    SharedFields,
):
    """Architecture of a `LanguageModel` (fields are primitives so OmegaConf can type-check overrides): the fields
    below, read by several mixers or the model around them (declared in `SharedFields`), and those one mixer reads
    (mixer_fields.py: its docstrings say what each does), each a flat key of its own.

    mixer:            a name in `MIXERS`: attention, mamba2, gated_deltanet, linear_attention, retnet, deltanet,
                      and the log-linear log_linear_<base> of each but attention; or the import path of a `Mixer`
                      subclass, `package.module:Name` (docs/adding-a-mixer.md).
    mixer_options:    the mixer's own options, for a mixer that declares them (`Mixer.options`, a
                      dataclass): checked against it, unknown keys refused with the closest name.
    d_model:          residual width.
    n_layers:         number of blocks (mixer, then the optional MLP, each pre-norm and residual).
    vocab_size:       token vocabulary (embedding rows and logits).
    max_len:          longest sequence the model serves: the lambda head outputs num_levels(max_len)
                      levels and decoding caches hold max_len positions.
    expand:           width of the value path = expand * d_model (Mamba-2's d_inner; the other linear mixers'
                      value dim, fla's expand_v; their key dim is d_model).
    conv_size:        kernel of the depthwise causal short convolutions (Mamba-2, Gated DeltaNet, DeltaNet; linear
                      attention and RetNet have none).
    mlp_ratio:        hidden width of the SwiGLU MLP after each mixer as a multiple of d_model; 0 = no
                      MLP (zoology's MQAR models).
    tie_embeddings:   the LM head reuses the token embedding matrix.
    output_head:      what the final norm and LM head read (OUTPUT_HEADS, models/heads.py): "lm", each
                      position's own state; "decoder", every position decoded from the last position's
                      state by MAD's AutoEncoder decoder (the compression task; a run follows its task, so
                      it is no part of a run's identity: `data.task` is).
    input_embedding:  how tokens become vectors (INPUT_EMBEDDINGS, models/embeddings.py): "lookup", a row per
                      token; "stacked", a pair token the sum of its key's and its value's rows (zoology's stacked
                      MQAR). A run follows its task, like output_head.
    negative_eigenvalues: state tracking (Grazzi et al. 2025): Gated DeltaNet beta in (0, 2);
                      Mamba-2 a signed decay alpha = 2 exp(dt A) - 1 in (-1, 1].
    init:             how every parameter starts (INITS): "default", the suite's rules with the init options
                      (INIT_OPTIONS); "authors", every mixer as the authors' code starts it (flash-linear-attention
                      0.6.0's model of it: `Mixer.authors_init`, docs/runs.md), which fixes what the init
                      options set, so they must stay at their defaults.
    dt_init_max:      Mamba-2 and Gated DeltaNet start with step sizes dt log-uniform from 1e-3 to this
                      (0.1: Mamba's), and decay rates A in [1, 16] (Mamba-2: at the default A_init), so
                      the decay's log dt * A starts at most 1.6 * dt_init_max / 0.1. With
                      `negative_eigenvalues` Mamba-2's alpha is negative only where dt * A > ln 2: a larger
                      dt_init_max starts more heads there.
    norm_eps:         epsilon of every RMSNorm.
    impl:             operator implementation of the linear mixers ("auto": Triton on CUDA, chunk on CPU).
    selfcheck:        the fused kernels' self-check before their first use on a CUDA device
                      (kernels/selfcheck.py): "auto" (the stored verdict, or a check when there is none),
                      "force" (check again), "skip" (no check); None: LOGLINEAR_SELFCHECK, else "auto". No part
                      of a run's identity (result.json records what ran).
    chunk_size:       chunk length of the chunkwise operator (a power of two); on the CPU chunk path the
                      linear mixers use at most max(16, K, V), the delta rule's max(16, K) (rounded up to a
                      power of two): same output up to rounding, less dense work per chunk.
    A field added after runs were made is declared `ADDED` (loglinear/identity.py), as `init` and
    `mixer_options` are, so every earlier run keeps its id.
    """

    def __post_init__(self) -> None:
        self.validate()

    @property
    def lambda_levels(self) -> int:
        """Levels of the log-linear mixers' lambda heads: num_levels(max_len)."""
        return num_levels(self.max_len)

    @property
    def mlp_hidden(self) -> int:
        return round(self.mlp_ratio * self.d_model)

    def validate(self) -> None:
        """Raise a ValueError naming the field of the first impossible setting among those a config checks alone
        (the shared fields here, each mixer's group by its `check_own`): the mixer and lambda names, and what the
        mixer needs, are checked by `check_model` (models/mixers.py), which knows the registries."""
        for name in ("d_model", "n_layers", "max_len", "expand", "conv_size"):
            check_int(f"ModelConfig.{name}", getattr(self, name), minimum=1)
        check_int("ModelConfig.vocab_size", self.vocab_size, minimum=2)
        valid_impls = ("auto", *IMPLS)
        if self.impl not in valid_impls:
            raise ValueError(f"ModelConfig.impl: unknown impl {self.impl!r}; valid: {', '.join(valid_impls)}")
        if self.selfcheck is not None and self.selfcheck not in SELFCHECK_MODES:
            raise ValueError(f"ModelConfig.selfcheck: unknown mode {self.selfcheck!r}; valid: "
                             f"{', '.join(SELFCHECK_MODES)} or null (LOGLINEAR_SELFCHECK)")
        for name, registry in (("output_head", OUTPUT_HEADS), ("input_embedding", INPUT_EMBEDDINGS)):
            try:
                registry[getattr(self, name)]
            except ValueError as e:
                raise ValueError(f"ModelConfig.{name}: {e}") from None
        check_int("ModelConfig.chunk_size", self.chunk_size, minimum=1)
        if self.chunk_size & (self.chunk_size - 1):
            raise ValueError(f"ModelConfig.chunk_size must be a power of two, got {self.chunk_size}")
        check_float("ModelConfig.mlp_ratio", self.mlp_ratio, minimum=0)
        if not self.dt_init_max > DT_MIN:
            raise ValueError(
                f"ModelConfig.dt_init_max must be > {DT_MIN} (the smallest initial dt), got {self.dt_init_max}"
            )
        if self.init not in INITS:
            raise ValueError(f"ModelConfig.init: unknown option {self.init!r}; valid: {', '.join(INITS)}")
        if self.init == "authors":
            for f in fields(self):
                if f.name in INIT_OPTIONS and getattr(self, f.name) != f.default:
                    raise ValueError(
                        f"ModelConfig.{f.name}={getattr(self, f.name)!r}: init=authors fixes every initial value as "
                        f"the authors' code does; leave {f.name} at its default ({f.default!r}) or use init=default"
                    )
        check_float("ModelConfig.norm_eps", self.norm_eps, above=0)
        for group in (AttentionFields, Mamba2Fields, GatedDeltaNetFields, LinearAttentionFields, RetNetFields,
                      LogLinearFields):
            group.check_own(self)

    @classmethod
    def from_mapping(cls, values: object) -> ModelConfig:
        """A ModelConfig from a ModelConfig, a dict or an OmegaConf DictConfig; unknown keys are a ValueError."""
        if isinstance(values, cls):
            return values
        known = {f.name for f in fields(cls)}
        items = dict(values)  # type: ignore[call-overload]
        unknown = sorted(set(items) - known)
        if unknown:
            raise ValueError(f"ModelConfig has no field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        return cls(**items)

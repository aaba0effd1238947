"""The sequence-mixer interface: what a mixer computes and what it says about itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import Tensor, nn

from loglinear.models.config import INIT_OPTIONS
from loglinear.models.lambda_params import LambdaHead

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig

class Mixer(nn.Module):
    """A causal sequence mixer (B, T, d_model) -> (B, T, d_model) that can also decode token by token.

    `init_cache` returns the decoding state of a batch; `step(x_t, cache)` maps one token's hidden
    state (B, d_model) to its output and the updated cache (which may be the same object, changed
    in place). Stepping through a sequence reproduces `forward` on it.

    Every mixer class also describes itself (mixers.py registers it under `name`; reports, benchmarks
    and tests read these instead of keeping their own tables):
    name:         the `model.mixer` value that selects it.
    display_name: its row label in report tables ("Mamba-2").
    base:         for a log-linear mixer, the `name` of the mixer it extends (the paired comparisons'
                  baseline); None for a base mixer.
    log_linear:   whether it reads a Fenwick level hierarchy with a lambda head (`model.lambda_param`
                  applies to it).
    transitions:  whether it has recurrent state transitions (`model.negative_eigenvalues` applies to it).
    size_fields:  the ModelConfig fields that size it and not every mixer (`state_dim` sizes Mamba-2 only):
                  a report shows `-` for them in the rows of mixers that do not read them.
    init_fields:  the init options (`config.INIT_OPTIONS`) it reads under `init=default` (all of them unless it
                  says otherwise): a report shows `-` for the others in its rows, as for `size_fields`.
    num_heads(cfg): how many heads it has under a ModelConfig.
    options:      a dataclass of its own options (`model.mixer_options`), typed and with defaults; None (the
                  suite's mixers): it takes none. `read_options(cfg)` gives them, checked.
    authors_init: where its start under `model.init=authors` comes from (file and function of the authors'
                  code: flash-linear-attention 0.6.0 unless it says otherwise); None: it has no such start,
                  and `model.init=authors` refuses it. The mixer applies those rules itself when built with
                  that config.
    compile_defect: what was seen where its compiled training step is known to be wrong; `train.compile=true`
                  is refused for it, and for its subclasses (whichever name or import path selects them) unless
                  they set their own (None: none known).

    `state_size(seq_len)` counts the numbers one sequence's decoding cache holds in this layer after
    `seq_len` tokens (docs/runs.md, "State size"); tests/models/test_state_size.py counts the real cache.
    """

    name: ClassVar[str]
    display_name: ClassVar[str]
    base: ClassVar[str | None] = None
    log_linear: ClassVar[bool] = False
    transitions: ClassVar[bool] = False
    size_fields: ClassVar[frozenset[str]] = frozenset()
    init_fields: ClassVar[frozenset[str]] = frozenset(INIT_OPTIONS)
    options: ClassVar[type | None] = None
    authors_init: ClassVar[str | None] = None
    compile_defect: ClassVar[str | None] = None

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.d_model = cfg.d_model
        self.lambda_head: LambdaHead | None = None  # the log-linear mixers' level weights

    @classmethod
    def num_heads(cls, cfg: ModelConfig) -> int:
        """Heads of this mixer built from `cfg`."""
        raise NotImplementedError

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        """Raise a ValueError naming the field when `cfg` cannot build this mixer."""

    @classmethod
    def read_options(cls, cfg: ModelConfig) -> Any:
        """`cfg.mixer_options` as an instance of `options` (its defaults where not given); an unknown key (named
        with the closest valid one) or a value of the wrong type is a ValueError naming the key."""
        if cls.options is None:
            if cfg.mixer_options:
                raise ValueError(f"ModelConfig.mixer_options: mixer {cfg.mixer!r} takes no options, got "
                                 f"{', '.join(sorted(cfg.mixer_options))}")
            return None
        try:
            return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls.options), cfg.mixer_options))
        except OmegaConfBaseException as e:
            key = getattr(e, "full_key", None)
            raise ValueError(f"ModelConfig.mixer_options.{key}: {str(e).splitlines()[0]}" if key else
                             f"ModelConfig.mixer_options: {str(e).splitlines()[0]}") from None

    def forward(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def init_cache(self, batch_size: int, max_len: int, *, device: torch.device, dtype: torch.dtype) -> Any:
        raise NotImplementedError

    def step(self, x_t: Tensor, cache: Any) -> tuple[Tensor, Any]:
        raise NotImplementedError

    def state_size(self, seq_len: int) -> int:
        """Floating-point numbers the decoder of this layer holds for one sequence after `seq_len` >= 1 tokens."""
        raise NotImplementedError

    def implementations(self) -> list[dict[str, Any]]:
        """The log-linear operator's implementations this mixer ran in this process, each with the self-check
        verdict it relied on: `{"impl": name, "selfcheck": verdict record or None}`; [] for a mixer without it."""
        return []

    def lambda_parameter_count(self) -> int:
        """Parameters of the lambda head, its projection included (0 for a base mixer)."""
        return 0 if self.lambda_head is None else sum(p.numel() for p in self.lambda_head.parameters())

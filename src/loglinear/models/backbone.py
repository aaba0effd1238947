"""The language model: embedding, pre-norm blocks (mixer, optional MLP), final norm, LM head; and `build_model`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from loglinear.models.config import ModelConfig
from loglinear.models.embeddings import INPUT_EMBEDDINGS
from loglinear.models.heads import OUTPUT_HEADS
from loglinear.models.init import init_from_seed
from loglinear.models.layers import RMSNorm, SwiGLU
from loglinear.models.mixers import MIXERS, check_model

logger = logging.getLogger(__name__)

class Block(nn.Module):
    """x <- x + mixer(norm(x)), then x <- x + mlp(norm(x)) when the config has an MLP."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.mixer_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mixer = MIXERS[cfg.mixer](cfg)
        has_mlp = cfg.mlp_hidden > 0
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps) if has_mlp else None
        self.mlp = SwiGLU(cfg.d_model, cfg.mlp_hidden) if has_mlp else None

    def _with_mlp(self, x: Tensor) -> Tensor:
        return x if self.mlp is None else x + self.mlp(self.mlp_norm(x))

    def forward(self, x: Tensor) -> Tensor:
        return self._with_mlp(x + self.mixer(self.mixer_norm(x)))

    def step(self, x_t: Tensor, cache: Any) -> tuple[Tensor, Any]:
        y, cache = self.mixer.step(self.mixer_norm(x_t), cache)
        return self._with_mlp(x_t + y), cache


@dataclass
class DecodeCache:
    """Per-layer mixer caches of a batch decoding in lock-step; `position` tokens consumed of at most `max_len`."""

    layers: list[Any]
    position: int
    max_len: int


@dataclass
class ParamReport:
    """Parameter counts of a LanguageModel (tied weights counted once).

    lambda_heads counts the log-linear heads' parameters, their projections included;
    `mixers` includes them, so `base_mixers` = mixers - lambda_heads is what the base model has.
    `output_head`: the decoder head's parameters (0 for the LM head alone).
    """

    total: int
    embedding: int
    mixers: int
    lambda_heads: int
    mlps: int
    norms: int
    output_head: int = 0

    @property
    def base_mixers(self) -> int:
        return self.mixers - self.lambda_heads

    @property
    def overhead_vs_mixers_pct(self) -> float:
        """Lambda parameters as a percentage of the base mixers' parameters."""
        return 100.0 * self.lambda_heads / self.base_mixers

    @property
    def overhead_vs_model_pct(self) -> float:
        """Lambda parameters as a percentage of the base model (the paper's measure: < 3% Mamba-2, < 0.4% GDN)."""
        return 100.0 * self.lambda_heads / (self.total - self.lambda_heads)

    def __str__(self) -> str:
        text = (
            f"{self.total:,} parameters: embedding {self.embedding:,}, mixers {self.mixers:,}, "
            f"MLPs {self.mlps:,}, norms {self.norms:,}"
        )
        if self.output_head:
            text += f", output head {self.output_head:,}"
        if self.lambda_heads:
            text += (
                f"; lambda heads {self.lambda_heads:,} (+{self.overhead_vs_mixers_pct:.2f}% of the base mixers, "
                f"+{self.overhead_vs_model_pct:.2f}% of the base model)"
            )
        return text


def _count(modules: list[nn.Module | None]) -> int:
    params = {id(p): p for m in modules if m is not None for p in m.parameters()}
    return sum(p.numel() for p in params.values())


class LanguageModel(nn.Module):
    """Token embedding (`cfg.input_embedding`: a row per token, or zoology's stacked pairs), `n_layers` pre-norm
    blocks, the output head (`cfg.output_head`: nothing, or the decoder that reads the last position alone), final
    RMSNorm, LM head (tied to the embedding or not).

    `model(inputs, score_mask=None)`: inputs (B, T) int64. Without score_mask returns logits
    (B, T, vocab); with a boolean score_mask (B, T) returns logits only where it is true, shape
    (score_mask.sum(), vocab) in row-major order (= full_logits[score_mask]), skipping the final norm
    and the vocabulary projection elsewhere (they dominate the cost when few positions are scored).
    `model(inputs, at=index)` with index (P,) int64 positions in the flattened (B * T) batch returns the logits
    (P, vocab) there: the same logits in a shape that does not depend on the data (packed training pads index).

    Decoding: `cache = model.init_cache(batch_size, max_len)`, then
    `logits_t, cache = model.step(tokens_t, cache)` with tokens_t (B,) and logits_t (B, vocab);
    stepping through a sequence reproduces the parallel logits.

    Every parameter starts from `seed` and its module's qualified name (`init_from_seed`, init.py).
    """

    def __init__(self, cfg: ModelConfig, seed: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = INPUT_EMBEDDINGS[cfg.input_embedding](cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.head = OUTPUT_HEADS[cfg.output_head](cfg.d_model, cfg.max_len, cfg.norm_eps)
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        init_from_seed(self, seed)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embedding.weight

    def forward(self, inputs: Tensor, score_mask: Tensor | None = None, *, at: Tensor | None = None) -> Tensor:
        return self.lm_head(self.features(inputs, score_mask, at=at))

    def features(self, inputs: Tensor, score_mask: Tensor | None = None, *, at: Tensor | None = None) -> Tensor:
        """What the LM head reads where `forward` returns logits (the final norm's output): the logits are
        `lm_head(features(...))`, which a loss fused with the head takes apart (`linear_cross_entropy`)."""
        h = self.embedding(inputs)
        for block in self.blocks:
            h = block(h)
        h = self.head(h)
        if at is not None:
            h = h.flatten(0, 1).index_select(0, at)
        elif score_mask is not None:
            if score_mask.dtype != torch.bool or score_mask.shape != inputs.shape:
                raise ValueError(
                    f"score_mask must be a bool tensor of the inputs' shape {tuple(inputs.shape)}, "
                    f"got {score_mask.dtype} {tuple(score_mask.shape)}"
                )
            h = h[score_mask]
        return self.norm(h)

    def init_cache(self, batch_size: int, max_len: int | None = None) -> DecodeCache:
        """Empty decoding caches for `batch_size` sequences of up to max_len tokens (default ModelConfig.max_len)."""
        max_len = self.cfg.max_len if max_len is None else max_len
        weight = self.embedding.weight
        layers = [
            block.mixer.init_cache(batch_size, max_len, device=weight.device, dtype=weight.dtype)
            for block in self.blocks
        ]
        return DecodeCache(layers, 0, max_len)

    def step(self, tokens_t: Tensor, cache: DecodeCache) -> tuple[Tensor, DecodeCache]:
        """One token per sequence: tokens_t (B,) int64 -> logits (B, vocab) and the cache after it."""
        if self.cfg.output_head != "lm":
            raise ValueError(f"output_head={self.cfg.output_head} decodes every position from the whole sequence's "
                             "last state: a model with it has no token-by-token decoding")
        if cache.position >= cache.max_len:
            raise ValueError(f"the cache is full: it was made for max_len={cache.max_len} tokens")
        h = self.embedding(tokens_t)
        layers = []
        for block, layer_cache in zip(self.blocks, cache.layers, strict=True):
            h, layer_cache = block.step(h, layer_cache)
            layers.append(layer_cache)
        return self.lm_head(self.norm(h)), DecodeCache(layers, cache.position + 1, cache.max_len)

    def state_sizes(self, seq_len: int) -> list[int]:
        """Per layer, the numbers one sequence's decoding cache holds after `seq_len` tokens (`Mixer.state_size`)."""
        return [block.mixer.state_size(seq_len) for block in self.blocks]

    def implementations(self) -> dict[str, list[dict[str, Any]]]:
        """Per mixer that runs the log-linear operator (`blocks.<i>.mixer`): the implementations it ran in this
        process and the self-check verdicts they relied on (`Mixer.implementations`)."""
        used = {f"blocks.{i}.mixer": block.mixer.implementations() for i, block in enumerate(self.blocks)}
        return {name: impls for name, impls in used.items() if impls}

    def param_report(self) -> ParamReport:
        mixers = [b.mixer for b in self.blocks]
        mlps: list[nn.Module | None] = [b.mlp for b in self.blocks]
        embedding = _count([self.embedding, self.lm_head])
        n_mixers, n_mlps, n_head, total = _count(mixers), _count(mlps), _count([self.head]), _count([self])
        return ParamReport(
            total=total, embedding=embedding, mixers=n_mixers,
            lambda_heads=sum(m.lambda_parameter_count() for m in mixers),
            mlps=n_mlps, norms=total - embedding - n_mixers - n_mlps - n_head, output_head=n_head,
        )


def build_model(cfg: ModelConfig | Mapping[str, Any], seed: int | None = None) -> LanguageModel:
    """Validate `cfg` (a ModelConfig, dict or OmegaConf DictConfig) and build its LanguageModel.

    Every initial weight comes from `seed` and its module's name (init.py): two models with the same
    seed share every parameter they have in common. seed None draws one from torch's global generator
    (so `torch.manual_seed` still makes a build reproducible). Impossible settings raise a ValueError
    naming the field. The parameter report (`model.param_report()`) is logged at INFO level.
    """
    cfg = ModelConfig.from_mapping(cfg)
    cfg.validate()
    check_model(cfg)
    if seed is None:
        seed = int(torch.randint(2**62, ()).item())
    model = LanguageModel(cfg, seed)
    logger.info("%s: %s", cfg.mixer, model.param_report())
    return model

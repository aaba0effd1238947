"""Causal multi-head softmax attention with RoPE, through `scaled_dot_product_attention`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loglinear.checks import check_int
from loglinear.kernels.folded import call_folded
from loglinear.models.layers import apply_rope
from loglinear.models.mixer import Mixer
from loglinear.models.mixer_fields import check_heads

if TYPE_CHECKING:
    from loglinear.models.config import ModelConfig


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far: k, v (B, H, max_len, head dim); `length` of them are filled."""

    k: Tensor
    v: Tensor
    length: int


class Attention(Mixer):
    """softmax(q k^T / sqrt(D) + causal mask) v per head, with RoPE on q and k; no biases.

    Heads: ModelConfig.attention_heads, or max(1, d_model // 64); head dim D = d_model / heads.
    Decoding appends to a preallocated KV cache (changed in place) and attends over its filled part.
    """

    name, display_name = "attention", "Transformer"
    size_fields = frozenset({"attention_heads"})
    init_fields = frozenset()
    # its one rule, every projection N(0, 0.02^2), is the authors' too: fla 0.6.0 rescales no projection there
    authors_init = "fla/models/transformer/modeling_transformer.py, TransformerPreTrainedModel._init_weights"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.n_heads = self.num_heads(cfg)
        self.head_dim = cfg.d_model // self.n_heads
        self.rope_base = cfg.rope_base
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    @classmethod
    def num_heads(cls, cfg: ModelConfig) -> int:
        return cfg.attention_heads if cfg.attention_heads is not None else max(1, cfg.d_model // 64)

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        check_heads(cfg.d_model, cls.num_heads(cfg), "attention_heads", even_for="RoPE")

    def _qkv(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, d_model) -> q, k, v (B, H, T, D), RoPE applied to q and k."""
        q, k, v = self.qkv(x).unflatten(-1, (3, self.n_heads, self.head_dim)).unbind(-3)  # (B, T, H, D) each
        q, k = apply_rope(q, positions, self.rope_base), apply_rope(k, positions, self.rope_base)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self._qkv(x, torch.arange(x.shape[1], device=x.device))
        o = call_folded(F.scaled_dot_product_attention, q, k, v, is_causal=True)  # (B, H, T, D)
        return self.out_proj(o.transpose(1, 2).flatten(-2))

    def init_cache(self, batch_size: int, max_len: int, *, device: torch.device, dtype: torch.dtype) -> KVCache:
        shape = (batch_size, self.n_heads, max_len, self.head_dim)
        return KVCache(
            torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype), 0
        )

    def state_size(self, seq_len: int) -> int:
        """Keys and values of `seq_len` tokens: 2 * heads * head dim * seq_len (the filled part of the cache)."""
        check_int("seq_len", seq_len, minimum=1)
        return 2 * self.n_heads * self.head_dim * seq_len

    def step(self, x_t: Tensor, cache: KVCache) -> tuple[Tensor, KVCache]:
        t = cache.length
        if t >= cache.k.shape[2]:
            raise ValueError(f"the KV cache holds {cache.k.shape[2]} tokens (max_len) and is full")
        q, k, v = self._qkv(x_t[:, None], torch.tensor([t], device=x_t.device))  # (B, H, 1, D)
        cache.k[:, :, t : t + 1] = k
        cache.v[:, :, t : t + 1] = v
        cache.length = t + 1
        o = F.scaled_dot_product_attention(q, cache.k[:, :, : t + 1], cache.v[:, :, : t + 1])  # (B, H, 1, D)
        return self.out_proj(o[:, :, 0].flatten(-2)), cache

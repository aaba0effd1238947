"""What a log-linear model does with its Fenwick levels: lambda per level, token by token.

Seen from position t (0-indexed), level 0 holds the token itself and level l >= 1 the 2^(l-1)
earlier positions s with bit_length(t XOR s) = l (kernels/fenwick.py). That block lies before t
only when bit l-1 of t is set, so level l >= 1 is *occupied* at t exactly when that bit is set;
levels above bit_length(t) never are. A level counts at a token only where it is occupied: at the
others lambda_t^(l) multiplies an empty state, changes no output and gets no gradient, so its
value says nothing about what the model learned.

- `occupied_levels(T, L)`: the (T, L) mask of occupied levels.
- `capture_lambda(model)`: forward hooks on every `LambdaHead` record lambda (B, T, H, L) per layer.
- `level_output_norms(mixer, x)`: ||S^(l)_t q_t|| per level (the level's readout before lambda).
- `effective_weights(lam, norms)`: lambda times the level's readout norm, as a share of the sum
  over levels (sums to 1 at each token and head): how much of the output each level carries.
- `LevelStatistics`: per (layer, head, level), over occupied tokens: mean, std, quantiles of
  lambda, and the mean effective weight.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from loglinear.kernels import num_levels
from loglinear.models.lambda_params import LambdaHead

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def occupied_levels(seq_len: int, n_levels: int, device: torch.device | str | None = None) -> Tensor:
    """(seq_len, n_levels) bool: level 0 always, level l >= 1 where bit l-1 of the position is set."""
    t = torch.arange(seq_len, device=device)[:, None]
    level = torch.arange(n_levels, device=device)[None, :]
    return (level == 0) | (((t >> (level - 1).clamp_min(0)) & 1) == 1)


def lambda_heads(model: nn.Module) -> list[LambdaHead]:
    """The model's lambda heads in layer order (empty for a model without log-linear mixers)."""
    return [m for m in model.modules() if isinstance(m, LambdaHead)]


@contextlib.contextmanager
def capture_lambda(model: nn.Module) -> Iterator[list[list[Tensor]]]:
    """Within the block, every forward of the model appends each layer's lambda (B, T, H, L), detached.

    Yields one list per lambda head (layer order). L is the head's num_levels(max_len); levels a
    sequence does not reach are never occupied (see `occupied_levels`).
    """
    heads = lambda_heads(model)
    captured: list[list[Tensor]] = [[] for _ in heads]

    def recorder(store: list[Tensor]):
        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            store.append(output.detach())

        return hook

    handles = [head.register_forward_hook(recorder(store)) for head, store in zip(heads, captured, strict=True)]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def level_output_norms(mixer: nn.Module, x: Tensor) -> Tensor:
    """||S^(l)_t q_t|| for every level: x (B, T, d_model), a log-linear mixer's input -> (B, T, H, L), float64.

    The operator's output o_t = sum_l lambda_t^(l) S^(l)_t q_t is linear in lambda, and the mixer's
    `norm` receives o (Gated DeltaNet) or o plus a skip term that does not depend on lambda
    (Mamba-2's D x). So the mixer is run once per level with lambda replaced by that level's unit
    vector, and once with lambda = 0, on a float64 copy (the differences are exact up to float64
    rounding); the difference of the norm's inputs is the level's readout. Only forward hooks are
    used: the mixer's code is not touched.
    """
    probe = copy.deepcopy(mixer).to(torch.float64)
    probe.impl = "chunk"  # float64 runs on the chunk path on any device (the Triton kernels refuse it)
    head = probe.lambda_head
    B, T = x.shape[:2]
    n_levels = head.n_levels
    R = n_levels + 1  # replica 0: lambda = 0; replica 1 + l: lambda = e_l
    units = torch.cat([torch.zeros(1, n_levels), torch.eye(n_levels)]).to(x.device, torch.float64)
    norm_inputs: list[Tensor] = []

    def set_lambda(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        shape = output.shape  # (R * B, T, H, L)
        return units[:, None, None, None, :].expand(R, B, T, shape[-2], n_levels).reshape(shape).to(output.dtype)

    def read_norm_input(module: nn.Module, args: tuple) -> None:
        norm_inputs.append(args[0])

    handles = [head.register_forward_hook(set_lambda), probe.norm.register_forward_pre_hook(read_norm_input)]
    try:
        with torch.no_grad():
            probe(x.to(torch.float64).repeat(R, 1, 1))
    finally:
        for handle in handles:
            handle.remove()
    H = head.n_heads
    y = norm_inputs[0].reshape(R, B, T, H, -1)
    readout = y[1:] - y[:1]  # (L, B, T, H, V)
    return readout.norm(dim=-1).permute(1, 2, 3, 0)


def effective_weights(lam: Tensor, norms: Tensor) -> Tensor:
    """|lambda_t^(l)| ||S^(l)_t q_t|| / sum_m |lambda_t^(m)| ||S^(m)_t q_t||: (..., L); NaN where the sum is 0."""
    contribution = lam.abs().to(norms.dtype) * norms
    total = contribution.sum(-1, keepdim=True)
    return torch.where(total > 0, contribution / total, torch.full_like(contribution, float("nan")))


@dataclass
class LevelRow:
    """One (layer, head, level): lambda over the tokens where the level is occupied, and its mean effective weight."""

    layer: int
    head: int
    level: int
    tokens: int
    mean: float
    std: float
    quantiles: dict[float, float]
    effective_mean: float
    effective_tokens: int


QUANTILE_SAMPLE = 50_000
"""Tokens per (layer, level) kept for the quantiles: all of them up to this many, a uniform sample beyond."""


@dataclass
class _Moments:
    """Count, mean and sum of squared deviations per head (float64), combined batch by batch (Chan et al.)."""

    n: int
    mean: Tensor
    m2: Tensor

    def merge(self, values: Tensor) -> None:
        n_b, mean_b = values.shape[0], values.mean(0)
        m2_b = ((values - mean_b) ** 2).sum(0)
        n = self.n + n_b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (n_b / n)
        self.m2 = self.m2 + m2_b + delta**2 * (self.n * n_b / n)
        self.n = n


class _Sample:
    """A uniform sample without replacement of at most `size` token rows (bottom-k of random keys; seeded)."""

    def __init__(self, size: int, generator: torch.Generator) -> None:
        self.size, self.generator = size, generator
        self.keys = torch.empty(0)
        self.values: Tensor | None = None

    def add(self, values: Tensor) -> None:
        keys = torch.cat([self.keys, torch.rand(values.shape[0], generator=self.generator)])
        values = values if self.values is None else torch.cat([self.values, values])
        if keys.numel() > self.size:
            keep = keys.topk(self.size, largest=False).indices
            keys, values = keys[keep], values[keep]
        self.keys, self.values = keys, values


class LevelStatistics:
    """Collects lambda (and effective weights) per layer over batches; `rows()` gives the per-level statistics.

    Each `add` takes a batch (B, T, H, L) of one sequence length; only occupied levels count. Mean and
    std (population) run over every token, in float64; the quantiles over every token up to
    QUANTILE_SAMPLE per (layer, level), else over a uniform sample of that many. For lambda that is
    the same at every token (`static`, `constant`, or any head whose input is fixed) every statistic
    is that value exactly (std 0).
    """

    def __init__(self, quantile_sample: int = QUANTILE_SAMPLE, seed: int = 0) -> None:
        self.quantile_sample = quantile_sample
        self._generator = torch.Generator().manual_seed(seed)
        self._moments: dict[tuple[int, int], _Moments] = {}
        self._samples: dict[tuple[int, int], _Sample] = {}
        self._effective: dict[tuple[int, int], _Moments] = {}

    def add(self, layer: int, lam: Tensor) -> None:
        for level, values in _occupied_values(lam):
            key = (layer, level)
            _merge(self._moments, key, values)
            self._samples.setdefault(key, _Sample(self.quantile_sample, self._generator)).add(values)

    def add_effective(self, layer: int, weights: Tensor) -> None:
        """weights (B, T, H, L) from `effective_weights`; NaN (no output at all) is left out."""
        for level, values in _occupied_values(weights):
            for h in range(values.shape[1]):  # heads differ in which tokens are NaN
                column = values[:, h]
                _merge(self._effective, (layer, level, h), column[~column.isnan()][:, None])

    def rows(self) -> list[LevelRow]:
        rows = []
        for (layer, level), moments in sorted(self._moments.items()):
            sample = self._samples[(layer, level)].values.numpy()
            qs = np.quantile(sample, QUANTILES, axis=0)  # (n_quantiles, H)
            std = (moments.m2 / moments.n).sqrt()
            for h in range(moments.mean.shape[0]):
                effective = self._effective.get((layer, level, h))
                has_effective = effective is not None and effective.n > 0
                rows.append(LevelRow(
                    layer, h, level, moments.n, float(moments.mean[h]), float(std[h]),
                    {q: float(v) for q, v in zip(QUANTILES, qs[:, h], strict=True)},
                    float(effective.mean[0]) if has_effective else float("nan"), effective.n if has_effective else 0,
                ))
        return rows


def _merge(store: dict, key: tuple, values: Tensor) -> None:
    if values.shape[0] == 0:
        return
    if key not in store:
        store[key] = _Moments(0, torch.zeros(values.shape[1], dtype=torch.float64),
                              torch.zeros(values.shape[1], dtype=torch.float64))
    store[key].merge(values)


def _occupied_values(values: Tensor) -> Iterator[tuple[int, Tensor]]:
    """(level, values at the tokens where it is occupied as (tokens, H) float64 on the CPU) for a batch (B, T, H, L)."""
    B, T, H, L = values.shape
    occupied = occupied_levels(T, L, values.device)
    for level in range(min(L, num_levels(T))):
        yield level, values[:, occupied[:, level], :, level].reshape(-1, H).detach().to("cpu", torch.float64)

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

    handles = [head.register_forward_hook(recorder(store)) for head, store in zip(heads, captured)]
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


class LevelStatistics:
    """Collects lambda (and effective weights) per layer over batches; `rows()` gives the per-level statistics.

    Each `add` takes a batch (B, T, H, L) of one sequence length; only occupied levels count.
    Values are kept on the CPU (float32 for lambda, exact for the parameterisations that are not
    data-dependent: their mean and quantiles are the parameters themselves, their std 0).
    """

    def __init__(self) -> None:
        self._lam: dict[tuple[int, int], list[Tensor]] = {}
        self._effective: dict[tuple[int, int], list[Tensor]] = {}

    def add(self, layer: int, lam: Tensor) -> None:
        _collect(self._lam, layer, lam)

    def add_effective(self, layer: int, weights: Tensor) -> None:
        _collect(self._effective, layer, weights)

    def rows(self) -> list[LevelRow]:
        rows = []
        for (layer, level), chunks in sorted(self._lam.items()):
            values = torch.cat(chunks).to(torch.float64).numpy()  # (tokens, H)
            effective = self._effective.get((layer, level))
            eff = torch.cat(effective).numpy() if effective else np.full((0, values.shape[1]), np.nan)
            qs = np.quantile(values, QUANTILES, axis=0)  # (n_quantiles, H)
            for h in range(values.shape[1]):
                finite = eff[:, h][~np.isnan(eff[:, h])]
                rows.append(LevelRow(
                    layer, h, level, values.shape[0], float(values[:, h].mean()), float(values[:, h].std()),
                    {q: float(v) for q, v in zip(QUANTILES, qs[:, h])},
                    float(finite.mean()) if finite.size else float("nan"), int(finite.size),
                ))
        return rows


def _collect(store: dict[tuple[int, int], list[Tensor]], layer: int, values: Tensor) -> None:
    """Append values (B, T, H, L) at each occupied (token, level) to store[(layer, level)] as (tokens, H)."""
    B, T, H, L = values.shape
    occupied = occupied_levels(T, L, values.device)
    for level in range(min(L, num_levels(T))):
        at = values[:, occupied[:, level], :, level].reshape(-1, H)
        store.setdefault((layer, level), []).append(at.detach().cpu())

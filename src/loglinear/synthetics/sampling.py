"""Vectorised sampling without replacement, one independent draw per batch row.

Both samplers return ordered draws (column j is the j-th item drawn) and treat the whole batch
at once, without a Python loop over examples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import torch
from torch import Tensor


def sample_distinct(rows: int, k: int, limits: Sequence[int], generator: torch.Generator) -> Tensor:
    """`(len(limits), rows, k)` int64: block b holds `rows` independent rows of k distinct integers
    from [0, limits[b]), each a uniformly random ordered k-tuple.

    Three exact methods, by how many of the n = limits[b] candidates are drawn:

    - few (8k^2 <= n): draw k i.i.d. values from [0, max(limits)) per row and redraw whole rows
      that repeat a value or leave their range (under 1 row in 8 is redrawn), i.e. i.i.d. draws
      conditioned on being valid, which makes every valid tuple equally likely;
    - many (4k < n): per row, the first k distinct in-range values of a stream of i.i.d. draws,
      which is sequential sampling without replacement (what `numpy.random.choice(replace=False)`
      does). A row whose `width` draws hold fewer than k such values is redrawn whole; acceptance
      depends only on which draws are equal or out of range, never on their values, so accepted
      tuples stay uniform. O(k) work per row instead of the O(n) of shuffling every candidate:
      this is what makes 256 keys out of 4095 cheap;
    - most (4k >= n): the first k of a random permutation (argsort of float64 noise,
      out-of-range candidates last).
    """
    least, most = min(limits), max(limits)
    if not 1 <= k <= least:
        raise ValueError(f"cannot draw k = {k} distinct values from n = {least}")
    bound = _as_column(tuple(limits))
    if 4 * k >= least:
        noise = torch.rand(len(limits), rows, most, dtype=torch.float64, generator=generator)
        noise.masked_fill_(torch.arange(most) >= bound, 2.0)
        return noise.argsort(dim=2)[..., :k]
    if 8 * k * k <= least:
        draws = torch.randint(0, most, (len(limits), rows, k), generator=generator)
        while True:
            ordered = draws.sort(dim=2).values
            invalid = (ordered[..., 1:] == ordered[..., :-1]).any(dim=2) | (ordered[..., -1] >= bound[..., 0])
            if not invalid.any():
                return draws
            draws[invalid] = torch.randint(0, most, (int(invalid.sum()), k), generator=generator)
    # Repeats among the draws are about Poisson(width^2 / 2n); this margin makes a redraw rare.
    expected_repeats = k * k / least
    width = math.ceil((k + 2 + expected_repeats + 4 * math.sqrt(expected_repeats)) * most / least)
    draws = torch.randint(0, most, (len(limits), rows, width), generator=generator)
    while True:
        usable = first_occurrences(draws.view(-1, width), limits, rows).view_as(draws)
        count = usable.cumsum(dim=2)
        short = count[..., -1] < k
        if not short.any():
            break
        draws[short] = torch.randint(0, most, (int(short.sum()), width), generator=generator)
    # The i-th usable draw goes to column i (1-based); the others to spare columns 0 and k + 1.
    column = count.mul_(usable).clamp_(max=k + 1)
    picked = torch.empty(len(limits), rows, k + 2, dtype=torch.int64).scatter_(2, column, draws)
    return picked[..., 1 : k + 1]


@lru_cache(maxsize=64)
def _as_column(limits: tuple[int, ...]) -> Tensor:
    """`(len(limits), 1, 1)` int64, cached: sampling small batches is dominated by per-op costs."""
    return torch.tensor(limits).view(-1, 1, 1)


def first_occurrences(draws: Tensor, limits: Sequence[int], rows: int) -> Tensor:
    """`(len(limits) * rows, m)` bool: True where a draw is below its block's limit and has not
    appeared earlier in its row (block b is rows b*rows .. (b+1)*rows - 1).

    Records the earliest position of every value in a `(R, max(limits))` table (int16 while
    positions fit); out-of-range values are pre-marked with position -1, so they never match.
    """
    width = draws.shape[1]
    dtype = torch.int16 if width < 2**15 else torch.int32
    position = torch.arange(width, dtype=dtype).expand(draws.shape[0], width)
    most = max(limits)
    earliest = torch.full((len(limits), rows, most), width, dtype=dtype)
    for block, limit in enumerate(limits):
        if limit < most:
            earliest[block, :, limit:] = -1
    earliest = earliest.view(-1, most).scatter_reduce_(1, draws, position, reduce="amin")
    return earliest.gather(1, draws) == position


def weighted_order_without_replacement(inverse_weights: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """`(B, k)` int64: per row, k indices drawn one after another without replacement, each with
    probability proportional to its weight among those not drawn yet (successive sampling, as
    `numpy.random.choice(replace=False, p=...)`).

    `inverse_weights` is `(B, S)` (an expanded view is fine): 1 / weight, `inf` for an index never
    to be drawn (each row needs at least k finite ones).
    Exponential-race form of the Gumbel-top-k trick: index i arrives at time E_i / w_i with
    E_i ~ Exp(1) independent; the order of arrival is the successive-sampling order.
    """
    uniform = torch.rand(inverse_weights.shape, generator=generator)
    arrival = uniform.log_().neg_().mul_(inverse_weights)  # -log(U) in (0, inf]: never 0 * inf
    if 2 * k <= arrival.shape[1]:
        return arrival.topk(k, dim=1, largest=False).indices
    return _argsort_rows(arrival)[:, :k]


def _argsort_rows(x: Tensor) -> Tensor:
    """Row-wise argsort of a non-negative float32 `(B, S)` tensor in one flat sort (twice as fast as
    a batched row sort on CPU): a non-negative float's bit pattern orders like the float, so the
    row index goes in the high 32 bits and the bits of the value in the low 32."""
    rows, width = x.shape
    row = torch.arange(rows).unsqueeze(1)
    key = (row << 32) | x.view(torch.int32).to(torch.int64)
    return key.view(-1).sort().indices.view(rows, width) - row * width

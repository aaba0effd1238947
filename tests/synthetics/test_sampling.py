"""The vectorised samplers without replacement: exact distributions, both duplicate finders agree."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics.sampling import first_occurrences, sample_distinct, weighted_order_without_replacement


def chi_square(observed: torch.Tensor, expected: torch.Tensor) -> float:
    return float(((observed.double() - expected) ** 2 / expected).sum())


@settings(max_examples=60)
@given(
    rows=st.integers(1, 10), width=st.integers(1, 40), limits=st.lists(st.integers(1, 300), min_size=1, max_size=3),
    seed=st.integers(0, 2**32),
)
def test_first_occurrences_marks_first_in_range_values(rows, width, limits, seed):
    draws = torch.randint(0, max(limits), (len(limits) * rows, width), generator=torch.Generator().manual_seed(seed))
    bounds = [limit for limit in limits for _ in range(rows)]
    expected = [
        [v < bound and v not in row[:j] for j, v in enumerate(row)]
        for row, bound in zip(draws.tolist(), bounds, strict=True)
    ]
    assert first_occurrences(draws, limits, rows).tolist() == expected


@settings(max_examples=60)
@given(
    rows=st.integers(1, 16), k=st.integers(1, 40), extra=st.lists(st.integers(0, 500), min_size=1, max_size=3),
    seed=st.integers(0, 2**32),
)
def test_distinct_draws_are_distinct_and_in_range(rows, k, extra, seed):
    limits = [k + e for e in extra]
    drawn = sample_distinct(rows, k, limits, torch.Generator().manual_seed(seed))
    assert drawn.shape == (len(limits), rows, k) and drawn.dtype == torch.int64
    for block, limit in zip(drawn, limits, strict=True):
        assert block.min() >= 0 and block.max() < limit
        assert all(len(set(row)) == k for row in block.tolist())


# k = 2 of n: few (8k^2 <= n: whole-row redraws), many (4k < n: first distinct of a stream), most
# (4k >= n: permutation); mixed limits exercise the out-of-range rejection.
@pytest.mark.parametrize("limits", [(33,), (40, 39), (9,), (12, 10), (7,), (8, 7)])
def test_ordered_tuples_are_uniform(limits):
    k, rows = 2, 30000
    drawn = sample_distinct(rows, k, limits, torch.Generator().manual_seed(1))
    for block, n in zip(drawn, limits, strict=True):
        codes = block[:, 0] * n + block[:, 1]
        counts = codes.bincount(minlength=n * n).view(n, n)
        assert counts.diagonal().sum() == 0
        tuples = n * (n - 1)
        off_diagonal = counts[~torch.eye(n, dtype=torch.bool)]
        # chi-square with tuples - 1 degrees of freedom, far below its 99.99% quantile
        assert chi_square(off_diagonal, torch.full((tuples,), rows / tuples)) < tuples + 6 * (2 * tuples) ** 0.5


def test_weighted_order_is_successive_sampling():
    weights = torch.tensor([0.5, 0.25, 0.15, 0.1])
    rows = 60000
    drawn = weighted_order_without_replacement((1 / weights).expand(rows, -1), 2, torch.Generator().manual_seed(2))
    counts = (drawn[:, 0] * 4 + drawn[:, 1]).bincount(minlength=16)
    pairs = list(itertools.permutations(range(4), 2))
    # P(i then j) = w_i * w_j / (1 - w_i)
    expected = torch.tensor([weights[i] * weights[j] / (1 - weights[i]) * rows for i, j in pairs], dtype=torch.float64)
    observed = torch.stack([counts[i * 4 + j] for i, j in pairs])
    assert chi_square(observed, expected) < 40.0  # 11 degrees of freedom


@pytest.mark.parametrize("k", [2, 3])  # top-k path (2k <= S) and full-sort path
def test_weighted_order_never_draws_excluded_indices(k):
    inverse = torch.tensor([[1.0, float("inf"), 2.0, float("inf"), 3.0]]).expand(500, -1)
    drawn = weighted_order_without_replacement(inverse, k, torch.Generator().manual_seed(0))
    assert set(drawn.flatten().tolist()) == {0, 2, 4}
    assert all(len(set(row)) == k for row in drawn.tolist())


def test_impossible_draw_raises():
    with pytest.raises(ValueError, match="k = 5 distinct values from n = 4"):
        sample_distinct(3, 5, (4, 10), torch.Generator())

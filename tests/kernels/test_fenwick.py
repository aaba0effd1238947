import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from loglinear.kernels import fenwick_level, level_matrix, num_levels
from loglinear.kernels.fenwick import (
    _bit_length_by_halving,
    bit_length,
    fenwick_merge,
    fenwick_merge_levels,
    state_bucket_levels,
    trailing_zeros,
)


def test_num_levels_matches_definition():
    assert [num_levels(n) for n in range(0, 10)] == [1, 1, 2, 3, 3, 4, 4, 4, 4, 5]
    for n in range(2, 3000):
        # the deepest level seen by the last query covers every earlier key
        assert num_levels(n) == 1 + max(fenwick_level(n - 1, s) for s in range(n))


def test_fenwick_level_blocks_are_contiguous_powers_of_two():
    for t in range(0, 200):
        for level in range(1, num_levels(t + 1)):
            keys = [s for s in range(t + 1) if fenwick_level(t, s) == level]
            if keys:
                assert keys == list(range(keys[0], keys[0] + 2 ** (level - 1)))
        assert fenwick_level(t, t) == 0


def test_fenwick_level_rejects_future_keys():
    with pytest.raises(ValueError, match="0 <= s <= t"):
        fenwick_level(3, 4)


@given(st.lists(st.integers(0, 2**52), min_size=1, max_size=50))
def test_bit_length_and_trailing_zeros_are_exact(xs):
    x = torch.tensor(xs)
    assert bit_length(x).tolist() == [v.bit_length() for v in xs]
    tz = [(v & -v).bit_length() - 1 for v in xs]
    assert trailing_zeros(x).tolist() == tz


@given(st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=50))
def test_bit_length_traced_under_compile_is_exact(xs):
    assert _bit_length_by_halving(torch.tensor(xs)).tolist() == [v.bit_length() for v in xs]


@given(st.integers(0, 10**9), st.integers(1, 40), st.integers(1, 40))
def test_level_matrix_matches_scalar_levels(offset, Tq, Ts):
    t = offset + torch.arange(Tq)
    s = offset + torch.arange(Ts)
    M = level_matrix(t, s)
    for i, j in itertools.product(range(Tq), range(Ts)):
        assert M[i, j] == ((offset + i) ^ (offset + j)).bit_length()


def test_merge_keeps_the_fenwick_invariant():
    """Run the recurrence on key indicators: bucket l at position t holds exactly the keys at level l."""
    T, L = 70, num_levels(70)
    S = torch.zeros(1, 1, L, T)  # bucket x key indicator
    for t in range(T):
        S = fenwick_merge(S, torch.tensor([t]))
        S[0, 0, 0, t] += 1
        for s in range(t + 1):
            assert S[0, 0, :, s].tolist() == [float(l == fenwick_level(t, s)) for l in range(L)]


def test_merge_is_per_sequence():
    S = torch.ones(2, 1, 4, 1)
    merged = fenwick_merge(S, torch.tensor([4, 0]))  # position 4: levels 0..2 -> 3; position 0: nothing
    assert merged[0, 0, :, 0].tolist() == [0, 0, 0, 4]
    assert merged[1, 0, :, 0].tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("start", [0, 1, 5, 8, 13, 64])
def test_state_bucket_levels_follow_the_recurrence(start):
    """A state's bucket l, seen from a later query t, sits where the recurrence puts its keys."""
    L, T = 9, 150
    last = max(start - 1, 0)
    levels = state_bucket_levels(torch.tensor([last]), start + torch.arange(T)[None], L)[0]
    S = torch.eye(L)[None, None]  # bucket l of the state marked by indicator l
    for t in range(start, start + T):
        S = fenwick_merge(S, torch.tensor([t]))
        for b in range(L):
            if S[0, 0, :, b].any():
                assert S[0, 0, :, b].nonzero().item() == levels[t - start, b]


def test_the_merge_of_levels_held_as_a_list_equals_the_per_sequence_merge():
    S = torch.randint(-100, 100, (2, 3, 8, 2)).double()  # integers: sums are exact in any order
    for p in range(0, 128):
        merged = fenwick_merge_levels(list(S.unbind(2)), p)
        expected = fenwick_merge(S, torch.tensor([p, p]))
        assert len(merged) == 8
        for level, s in enumerate(merged):
            assert torch.equal(torch.zeros_like(S[:, :, 0]) if s is None else s, expected[:, :, level])


def test_the_merge_of_levels_held_as_a_list_empties_them_and_grows_a_short_list():
    one = torch.ones(1, 1, 1)
    merged = fenwick_merge_levels([one, None], 8)  # position 8: levels 0..3 into level 4
    assert merged[:4] == [None] * 4 and merged[4].tolist() == [[[1.0]]] and len(merged) == 5
    unchanged = [one, one]
    assert fenwick_merge_levels(unchanged, 0) is unchanged

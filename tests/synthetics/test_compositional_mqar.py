"""Compositional MQAR restated: a grid of two-token keys, each queried once, answered by its value."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, get_task


@settings(max_examples=30)
@given(grid=st.integers(1, 3), extra=st.integers(0, 20), fillers=st.booleans(), seed=st.integers(0, 2**63 - 1))
def test_each_two_token_query_answers_the_value_of_its_pair(grid, extra, fillers, seed):
    pairs = grid * grid
    seq_len, context = 6 * pairs + extra, 3 * pairs
    task = get_task("compositional_mqar", vocab_size=31, seq_len=seq_len, num_kv_pairs=pairs,
                    random_non_queries=fillers)
    assert task.num_classes == 11
    batch = task.sample(16, seed)
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        triples = [tuple(tokens[i : i + 3]) for i in range(0, context, 3)]
        firsts, seconds = {a for a, _, _ in triples}, {b for _, b, _ in triples}
        assert all(1 <= a < 10 for a in firsts) and all(10 <= b < 20 for b in seconds)
        assert {(a, b) for a, b, _ in triples} == {(a, b) for a in firsts for b in seconds}  # the full grid
        assert len(firsts) == len(seconds) == grid
        value_of = {(a, b): v for a, b, v in triples}
        assert len(set(value_of.values())) == pairs and all(20 <= v < 31 for v in value_of.values())
        scored = [t for t in range(seq_len) if targets[t] != IGNORE_INDEX]
        assert len(scored) == pairs and all(t > context and (t - context) % 3 == 1 for t in scored)
        assert sorted((tokens[t - 1], tokens[t]) for t in scored) == sorted(value_of)
        assert all(targets[t] == value_of[tokens[t - 1], tokens[t]] for t in scored)
        if not fillers:
            queried = set(scored) | {t - 1 for t in scored}
            assert all(tokens[t] == 0 for t in range(context, seq_len) if t not in queried)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_kv_pairs": 8}, r"num_kv_pairs must be a perfect square \(1, 4, 9, 16, ...\), got 8"),
    ({"seq_len": 23}, r"seq_len must be >= 24, got 23"),
    ({"vocab_size": 12, "num_kv_pairs": 9}, r"vocab_size = 12 is too small for num_kv_pairs = 9"),
])
def test_bad_arguments_name_the_bound(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_task("compositional_mqar", **kwargs)

"""Stacked MQAR held to zoology's generator's semantics: every query's key stands in every pass of the context with
its one value, the answers sit at the last N positions, and each pass and the queries are orders of their own."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, get_task


@settings(max_examples=30, deadline=None)
@given(keys=st.integers(2, 12), pairs=st.integers(1, 12), passes=st.integers(1, 3), seed=st.integers(0, 2**63 - 1))
def test_every_query_is_answerable_at_zoologys_answer_positions(keys, pairs, passes, seed):
    pairs = min(pairs, keys)
    task = get_task("stacked_mqar", num_keys=keys, num_kv_pairs=pairs, num_passes=passes)
    assert task.seq_len == (passes + 1) * pairs and task.vocab_size == 2 * keys + keys**2 and task.num_classes == keys
    batch = task.sample(16, seed)
    assert torch.equal(batch.slices["num_kv_pairs"], torch.full((16,), pairs))
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        context, queries = tokens[: passes * pairs], tokens[passes * pairs :]
        assert all(t >= 2 * keys for t in context) and all(t < keys for t in queries)
        stacked = [divmod(t - 2 * keys, keys) for t in context]  # (key, value) of each context position
        value_of = dict(stacked[:pairs])
        assert len(value_of) == pairs and len(set(value_of.values())) == pairs  # distinct keys, distinct values
        for p in range(passes):  # each pass: every pair once, in an order of its own
            assert sorted(stacked[p * pairs : (p + 1) * pairs]) == sorted(value_of.items())
        assert sorted(queries) == sorted(value_of)  # every key queried once
        assert targets[: passes * pairs] == [IGNORE_INDEX] * (passes * pairs)
        assert targets[passes * pairs :] == [keys + value_of[k] for k in queries]


def test_the_orders_are_drawn_afresh_for_each_pass_and_the_queries():
    batch = get_task("stacked_mqar", num_keys=16, num_kv_pairs=8, num_passes=2).sample(200, 0)
    first, second, queries = batch.inputs[:, :8], batch.inputs[:, 8:16], batch.inputs[:, 16:]
    assert (first != second).any(dim=1).float().mean() > 0.9  # the same order twice: 1 in 8! by chance
    keys = (first - 32) // 16
    assert (keys != queries).any(dim=1).float().mean() > 0.9
    assert (torch.bincount(queries.flatten(), minlength=16) > 0).all()  # every key is drawn


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_keys": 4, "num_kv_pairs": 5}, r"num_kv_pairs must be <= 4, got 5"),
    ({"num_passes": 0}, r"num_passes must be >= 1, got 0"),
    ({"num_keys": 1}, r"num_keys must be >= 2, got 1"),
])
def test_impossible_settings_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_task("stacked_mqar", **kwargs)

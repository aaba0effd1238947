"""Forgetting MQAR restated: original pairs, then updates, then queries answered with each key's latest value."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, get_task


@settings(max_examples=30)
@given(pairs=st.integers(1, 6), updates=st.integers(0, 6), extra=st.integers(0, 20), fillers=st.booleans(),
       seed=st.integers(0, 2**63 - 1))
def test_each_query_answers_the_latest_value_of_its_key(pairs, updates, extra, fillers, seed):
    updates = min(updates, pairs)
    context = 2 * (pairs + updates)
    seq_len = context + 2 * pairs + extra
    task = get_task("forgetting_mqar", vocab_size=32, seq_len=seq_len, num_kv_pairs=pairs, num_updates=updates,
                    random_non_queries=fillers)
    assert task.num_classes == 16
    batch = task.sample(16, seed)
    assert batch.slices["num_updates"].eq(updates).all() and batch.slices["num_kv_pairs"].eq(pairs).all()
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        keys, values = tokens[0 : 2 * pairs : 2], tokens[1 : 2 * pairs : 2]
        assert len(set(keys)) == pairs and all(1 <= k < 16 for k in keys)
        assert len(set(values)) == pairs and all(16 <= v < 32 for v in values)
        latest = dict(zip(keys, values, strict=True))
        updated = tokens[2 * pairs : context : 2]
        assert len(set(updated)) == updates and set(updated) <= set(keys)
        for k, v in zip(updated, tokens[2 * pairs + 1 : context : 2], strict=True):
            assert 16 <= v < 32 and v != latest[k]  # an update never gives a key its own value back
            latest[k] = v
        scored = [t for t in range(seq_len) if targets[t] != IGNORE_INDEX]
        assert len(scored) == pairs and all(t >= context and (t - context) % 2 == 0 for t in scored)
        assert sorted(tokens[t] for t in scored) == sorted(keys)
        assert all(targets[t] == latest[tokens[t]] for t in scored)
        if not fillers:
            assert all(tokens[t] == 0 for t in range(context, seq_len) if t not in scored)


def test_updated_keys_are_a_uniform_subset():
    batch = get_task("forgetting_mqar", vocab_size=64, seq_len=64, num_kv_pairs=4, num_updates=1).sample(8000, 0)
    first_keys = batch.inputs[:, 0:8:2]
    which = (first_keys == batch.inputs[:, 8:9]).float().mean(dim=0)
    assert (which - 0.25).abs().max() < 0.02


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_updates": 9}, r"num_updates must be <= 8, got 9"),
    ({"seq_len": 39}, r"seq_len must be >= 40, got 39"),
    ({"vocab_size": 16, "num_kv_pairs": 8}, r"num_kv_pairs must be <= 7, got 8"),
    ({"num_updates": -1}, r"num_updates must be >= 0, got -1"),
])
def test_bad_arguments_name_the_bound(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_task("forgetting_mqar", **kwargs)

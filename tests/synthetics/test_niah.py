"""Needle in a haystack: every example read back token by token (its needles, its haystack, its queries and their
answers) and checked against RULER's definition; the depth puts the answer needles where it says; bad settings
are refused in one line."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, get_task
from loglinear.synthetics.niah import spread


def read_example(task, tokens: list[int], targets: list[int]) -> dict:
    """An example taken apart by the definition alone: the needles of its context (position, key, value), the
    query region's queries, and the targets where they stand."""
    K, W, kl, vl = task.key_vocab, task.value_vocab, task.key_len, task.value_len
    n, q, v = kl + vl, task.num_needle_queries, task.num_needle_values
    query = kl + v * vl
    context = task.seq_len - q * query
    is_key, is_value = (lambda t: 0 <= t < K), (lambda t: K <= t < K + W)
    needles, t = [], 0
    while t < context:
        if is_key(tokens[t]):
            assert all(map(is_key, tokens[t : t + kl])) and all(map(is_value, tokens[t + kl : t + n])), tokens
            needles.append((t, tuple(tokens[t : t + kl]), tuple(tokens[t + kl : t + n])))
            t += n
        else:
            # noise outside the needles (`needles`: only the C mod n tokens before the first slot)
            assert tokens[t] >= K + W and (task.haystack == "noise" or t < context % n), (t, tokens)
            t += 1
    assert all(targets[i] == IGNORE_INDEX for i in range(context))
    queries = []
    for i in range(q):
        start = context + i * query
        block, answers = tokens[start : start + query], targets[start : start + query]
        key, values = tuple(block[:kl]), block[kl:]
        expected = [IGNORE_INDEX] * (kl - 1) + values + [IGNORE_INDEX]
        assert answers == expected, (answers, expected)
        queries.append((key, [tuple(values[j : j + vl]) for j in range(0, len(values), vl)]))
    return {"needles": needles, "queries": queries, "context": context}


@settings(max_examples=40, deadline=None)
@given(key_len=st.integers(1, 2), value_len=st.integers(1, 2), keys=st.integers(1, 3), values=st.integers(1, 3),
       queries=st.integers(1, 3), haystack=st.sampled_from(["noise", "needles"]),
       depth=st.one_of(st.none(), st.sampled_from([0.0, 0.3, 0.5, 1.0])), extra=st.integers(0, 40),
       seed=st.integers(0, 2**63 - 1))
def test_every_example_reads_as_ruler_defines_it(key_len, value_len, keys, values, queries, haystack, depth, extra,
                                                  seed):
    queries = min(queries, keys)
    n = key_len + value_len
    seq_len = queries * (key_len + values * value_len) + 2 * keys * values * n + extra
    task = get_task("niah", seq_len=seq_len, key_vocab=4, value_vocab=3, noise_vocab=2, key_len=key_len,
                    value_len=value_len, num_needle_keys=keys, num_needle_values=values,
                    num_needle_queries=queries, haystack=haystack, depth=depth)
    assert task.vocab_size == 9 and task.num_classes == 3
    batch = task.sample(12, seed)
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        example = read_example(task, tokens, targets)
        queried = [key for key, _ in example["queries"]]
        assert len(set(queried)) == queries
        by_key: dict[tuple, list] = {}
        for position, key, value in example["needles"]:
            by_key.setdefault(key, []).append((position, value))
        for key, answers in example["queries"]:  # each queried key: its needles' values, in context order
            assert answers == [value for _, value in sorted(by_key[key])]
            assert len(set(answers)) == values
        needle_keys = [key for key, found in by_key.items() if len(found) == values]
        if haystack == "noise":
            assert len(example["needles"]) == keys * values and len(by_key) == keys
        else:  # every slot a needle; the distractors' keys are none of the needle keys
            slots = example["context"] // n
            assert len(example["needles"]) == slots
            assert all(key not in queried for key, found in by_key.items() if len(found) != values)
            assert len(needle_keys) >= queries
        if depth is not None:  # the answer needles stand together where the depth says
            answers = sorted(p for key in queried for p, _ in by_key[key])
            assert answers == list(range(answers[0], answers[0] + n * len(answers), n))
            room = example["context"] if haystack == "noise" else example["context"] // n
            block = len(answers) * (n if haystack == "noise" else 1)
            first = round(depth * (room - block))
            assert answers[0] == (first if haystack == "noise" else example["context"] % n + n * first)


def test_a_free_needle_stands_anywhere_and_a_deep_one_at_its_depth():
    task = get_task("niah", seq_len=40, key_vocab=4, value_vocab=4, noise_vocab=4)
    batch = task.sample(4000, 0)
    keys = (batch.inputs[:, :38] < 4).nonzero()  # the context: all but the query's key and value
    starts = torch.bincount(keys[:, 1], minlength=37)
    assert starts.sum() == 4000 and len(starts) == 37 and (starts > 0).all()  # every start of 2 tokens in 38
    assert starts.float().std() / starts.float().mean() < 0.2  # uniform, up to sampling noise (expected 0.1)
    for depth, where in ((0.0, 0), (0.5, 18), (1.0, 36)):
        deep = get_task("niah", seq_len=40, key_vocab=4, value_vocab=4, noise_vocab=4, depth=depth).sample(50, 1)
        assert ((deep.inputs[:, where] < 4) & (deep.inputs[:, where + 1] >= 4)).all()


def test_the_other_needles_stay_uniform_outside_the_answer_block():
    task = get_task("niah", seq_len=40, key_vocab=8, value_vocab=4, noise_vocab=4, num_needle_keys=2, depth=0.5)
    batch = task.sample(3000, 2)
    queried = batch.inputs[:, -2]
    other = (batch.inputs[:, :-2] < 8) & (batch.inputs[:, :-2] != queried[:, None])
    starts = torch.bincount(other.nonzero()[:, 1], minlength=37)
    assert starts[18:20].sum() == 0 and starts[17] == 0  # nothing in or across the block at 18, 19
    assert (starts[:17] > 0).all() and (starts[20:37] > 0).all()


def test_spread_places_runs_without_overlap_uniformly():
    generator = torch.Generator().manual_seed(0)
    starts = spread(5000, 3, 10, 3, generator)  # 3 runs of 3 in 10: C(4, 3) = 4 placements, 6 orders each
    ordered = starts.sort(dim=1).values
    assert ((ordered[:, 1:] - ordered[:, :-1]) >= 3).all() and ordered[:, -1].max() == 7
    placements = torch.unique(starts, dim=0, return_counts=True)[1]
    assert len(placements) == 24 and placements.min() > 150  # every placement and order, about 208 each


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_needle_queries": 2}, r"num_needle_queries must be <= 1, got 2"),
    ({"haystack": "essay"}, r"unknown niah haystack 'essay'; valid: \['noise', 'needles'\]"),
    ({"depth": 1.5}, r"depth must be <= 1.0, got 1.5"),
    ({"value_vocab": 1}, r"value_vocab leaves 1 possible answer"),
    ({"key_vocab": 2, "num_needle_keys": 3}, r"key_vocab\*\*key_len = 2 keys cannot give 3 distinct needle keys"),
    ({"key_vocab": 1, "haystack": "needles"}, r"and a distractor key other than them"),
    ({"value_vocab": 2, "num_needle_values": 3}, r"value_vocab\*\*value_len = 2 values cannot give each key 3"),
    ({"seq_len": 8, "num_needle_keys": 4}, r"seq_len = 8 leaves a context of 6 tokens, too short for 4 needles"),
    ({"seq_len": 12, "num_needle_keys": 5, "depth": 0.375},
     r"depth = 0.375 puts the answer needles where the context leaves room for 3 of the 4 other needles"),
    ({"noise_vocab": 0}, r"noise_vocab must be >= 1, got 0"),
    ({"key_vocab": 64, "key_len": 11}, r"key_vocab\*\*key_len = 73786976294838206464 is too many to draw from"),
])
def test_impossible_settings_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        get_task("niah", **kwargs)
    assert "\n" not in str(error.value)

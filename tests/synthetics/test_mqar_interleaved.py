"""MQAR's interleaved layout: zoology's vocabulary and targets, pairs and queries along the whole sequence with
log-uniform key-to-query distances, fillers that never repeat a key; zoology's layout untouched."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, get_task, interleaved
from loglinear.synthetics.interleaved import _free_triples
from loglinear.synthetics.recall_sources import recall_sources


@st.composite
def interleaved_arguments(draw: st.DrawFn) -> dict:
    seq_len = draw(st.integers(4, 96))
    vocab_size = draw(st.integers(4, 300))
    most = min(seq_len // 4, vocab_size // 2 - 1)
    pairs = draw(st.one_of(st.integers(1, most), st.lists(st.integers(1, most), min_size=1, max_size=4)))
    return {"vocab_size": vocab_size, "seq_len": seq_len, "num_kv_pairs": pairs,
            "random_non_queries": draw(st.booleans()), "layout": "interleaved"}


@settings(max_examples=80, deadline=None)
@given(arguments=interleaved_arguments(), batch_size=st.integers(1, 12), seed=st.integers(0, 2**64 - 1))
def test_each_query_is_answered_by_the_value_of_its_key(arguments, batch_size, seed):
    task = get_task("mqar", **arguments)
    batch = task.sample(batch_size, seed)
    half, vocab = task.vocab_size // 2, task.vocab_size
    sources = recall_sources(batch.inputs, batch.targets)
    options = [task.num_kv_pairs] if isinstance(task.num_kv_pairs, int) else task.num_kv_pairs
    for inputs, targets, source, pairs in zip(batch.inputs.tolist(), batch.targets.tolist(), sources.tolist(),
                                              batch.slices["num_kv_pairs"].tolist(), strict=True):
        assert pairs in options and all(0 <= x < vocab for x in inputs)
        scored = [t for t, y in enumerate(targets) if y != IGNORE_INDEX]
        assert len(scored) == pairs
        keys = [inputs[t] for t in scored]
        assert len(set(keys)) == pairs and all(1 <= k < half for k in keys)
        assert len({targets[t] for t in scored}) == pairs and all(half <= targets[t] < vocab for t in scored)
        used = set()
        for t in scored:
            s = source[t]
            assert 0 <= s <= t - 2 and inputs[s] == inputs[t] and inputs[s + 1] == targets[t]
            used |= {s, s + 1, t}
        assert len(used) == 3 * pairs  # no two pairs or queries share a position
        assert not {x for p, x in enumerate(inputs) if p not in used} & set(keys)  # no filler repeats a key
        if not task.random_non_queries:
            assert all(x == 0 for p, x in enumerate(inputs) if p not in used)


def test_distances_are_log_uniform_when_nothing_collides():
    """One pair per example: every distance 2 .. T-1 stays possible, so P(d) is exactly proportional to 1/d;
    the share of each power-of-two bucket matches it within 4 standard errors."""
    task = get_task("mqar", vocab_size=64, seq_len=64, num_kv_pairs=1, layout="interleaved")
    batch = task.sample(20000, 3)
    t = (batch.targets != IGNORE_INDEX).nonzero()[:, 1]
    d = t - recall_sources(batch.inputs, batch.targets).amax(dim=1)
    weights = {dist: 1 / dist for dist in range(2, 64)}
    total = sum(weights.values())
    for low in (2, 4, 8, 16, 32):
        expected = sum(w for dist, w in weights.items() if low <= dist < 2 * low) / total
        observed = float(((d >= low) & (d < 2 * low)).double().mean())
        assert abs(observed - expected) < 4 * math.sqrt(expected * (1 - expected) / len(d)), low


def test_the_default_layout_is_zoologys_stream():
    """The zoology stream at default options is the one drawn before the layout option existed (pinned)."""
    batch = get_task("mqar", vocab_size=64, seq_len=64, num_kv_pairs=[4, 8, 16]).sample(16, 11)
    same = get_task("mqar", vocab_size=64, seq_len=64, num_kv_pairs=[4, 8, 16], layout="zoology").sample(16, 11)
    assert torch.equal(batch.inputs, same.inputs) and torch.equal(batch.targets, same.targets)
    assert (int(batch.inputs.sum()), int(batch.targets.clamp(min=0).sum())) == PINNED_ZOOLOGY_SUMS


PINNED_ZOOLOGY_SUMS = (30442, 6449)


def test_the_interleaved_stream_is_pinned():
    """The committed interleaved studies' batches: a change of the draws (their order, their weights) would make
    their runs unreproducible under the same run ids."""
    batch = get_task("mqar", vocab_size=64, seq_len=64, num_kv_pairs=[4, 8, 16], layout="interleaved").sample(64, 11)
    weighted = int((batch.inputs * torch.arange(64)).sum())
    assert (int(batch.inputs.sum()), int(batch.targets.clamp(min=0).sum()), weighted) == PINNED_INTERLEAVED_SUMS


PINNED_INTERLEAVED_SUMS = (124465, 28967, 3839043)


@settings(max_examples=60, deadline=None)
@given(seq_len=st.integers(4, 80), rows=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_free_triples_count_what_the_mask_says(seq_len, rows, seed):
    """For each distance d = T-1 .. 2, the queries t with s = t - d, s + 1 and t free, counted directly."""
    generator = torch.Generator().manual_seed(seed)
    free = torch.rand(rows, seq_len, generator=generator) < 0.7
    starts = free[:, :-1] & free[:, 1:]
    pair_free = torch.cat([torch.zeros(rows, seq_len, dtype=torch.bool), starts,
                           torch.zeros(rows, 1, dtype=torch.bool)], dim=1)
    expected = torch.tensor([[sum(bool(free[b, t]) and t - d >= 0 and bool(starts[b, t - d])
                                  for t in range(seq_len)) for d in range(seq_len - 1, 1, -1)] for b in range(rows)])
    assert torch.equal(_free_triples(pair_free, free).long(), expected)


def test_an_unknown_layout_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown mqar layout 'spread'.*zoology.*interleaved"):
        get_task("mqar", layout="spread")


def test_recall_sources_refuses_a_batch_without_pairs():
    inputs = torch.tensor([[5, 9, 7, 5]])
    targets = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 10]])
    with pytest.raises(ValueError, match="no \\(key, value\\) pair before it"):
        recall_sources(inputs, targets)


@settings(max_examples=40, deadline=None)
@given(seq_len=st.integers(4, 80), rows=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_the_triples_a_pair_takes_are_the_ones_counted_again_without_it(seq_len, rows, seed):
    generator = torch.Generator().manual_seed(seed)
    free = torch.rand(rows, seq_len, generator=generator) < 0.7
    key = torch.randint(0, seq_len - 1, (rows,), generator=generator)
    query = torch.randint(0, seq_len, (rows,), generator=generator)
    taken = torch.stack([key, key + 1, query], dim=1)
    distances = torch.arange(seq_len - 1, 1, -1)
    before = interleaved._free_triples(pair_starts(free), free)
    lost = interleaved._lost_triples(free, taken, distances)
    after = free.clone()
    for position in taken.T:
        after[torch.arange(rows), position] = False
    assert torch.equal(before - lost, interleaved._free_triples(pair_starts(after), after))


def pair_starts(free):
    rows, seq_len = free.shape
    return torch.cat([torch.zeros(rows, seq_len, dtype=torch.bool), free[:, :-1] & free[:, 1:],
                      torch.zeros(rows, 1, dtype=torch.bool)], dim=1)


def test_long_sequences_draw_the_same_positions_with_the_linear_update(monkeypatch):
    """From INCREMENTAL_FROM tokens the free triples are updated, not counted again: the same draws, bit for bit."""
    pairs, length = torch.tensor([40, 64]), interleaved.INCREMENTAL_FROM
    updated = interleaved.interleaved_positions(pairs, 64, length, torch.Generator().manual_seed(5))
    monkeypatch.setattr(interleaved, "INCREMENTAL_FROM", length + 1)  # counted again at every pair, as before
    counted = interleaved.interleaved_positions(pairs, 64, length, torch.Generator().manual_seed(5))
    assert all(torch.equal(a, b) for a, b in zip(updated, counted, strict=True))

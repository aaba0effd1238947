"""MAD's tasks: each generator's layout, answers and knobs restated from the task's definition, row by row."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, get_task

seeds = st.integers(0, 2**63 - 1)


def recall_pairs(tokens: list[int], signal: int) -> list[tuple[int, int, bool]]:
    """(key, value, is_noise) per pair; noise pairs are the two tokens at or above `signal`."""
    pairs = []
    for k, v in zip(tokens[::2], tokens[1::2], strict=True):
        noise = k >= signal
        assert noise == (v >= signal)
        pairs.append((k, v, noise))
    return pairs


@settings(max_examples=25)
@given(pairs=st.integers(2, 20), vocab=st.integers(4, 20), noise_vocab=st.integers(0, 6),
       frac=st.sampled_from([0.0, 0.3, 0.9]), seed=seeds)
def test_in_context_recall_scores_every_repeated_key_with_its_value(pairs, vocab, noise_vocab, frac, seed):
    noise_vocab = min(noise_vocab, vocab - 3)
    frac = frac if noise_vocab else 0.0
    task = get_task("in_context_recall", vocab_size=vocab, seq_len=2 * pairs, noise_vocab_size=noise_vocab,
                    frac_noise=frac)
    signal, half = vocab - noise_vocab, (vocab - noise_vocab) // 2
    assert task.num_classes == signal - half
    batch = task.sample(16, seed)
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        value_of, expected = {}, []
        parsed = recall_pairs(tokens, signal)
        for k, v, noise in parsed:
            if noise:
                expected += [IGNORE_INDEX, IGNORE_INDEX]
                continue
            assert 0 <= k < half <= v < signal
            expected += [v if k in value_of else IGNORE_INDEX, IGNORE_INDEX]
            assert value_of.setdefault(k, v) == v
        assert targets == expected
        assert not parsed[-1][2] and targets[-2] == parsed[-1][1]


def test_in_context_recall_noise_fraction_and_the_last_query_is_uniform_over_earlier_keys():
    task = get_task("noisy_in_context_recall", seq_len=64, frac_noise=0.6)
    batch = task.sample(2000, 0)
    noise = batch.inputs[:, 0::2] >= 16
    # The last pair is never noise and one earlier pair per row is kept: 0.6 * 30 / 32 of the pairs.
    assert abs(noise.float().mean().item() - 0.6 * 30 / 32) < 0.01
    assert not noise[:, -1].any() and not noise[:, :-1].all(dim=1).any()
    first = get_task("in_context_recall", seq_len=4).sample(20000, 1)
    # With two pairs the query repeats the first key: each of the 8 keys equally often.
    assert torch.equal(first.inputs[:, 2], first.inputs[:, 0])
    counts = torch.bincount(first.inputs[:, 2], minlength=8).float()
    assert (counts / counts.mean() - 1).abs().max() < 0.1


def motifs(tokens: list[int], keys: int, pad: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (key motif, value motif) pairs: key tokens and value tokens come from disjoint ranges, so a
    sequence splits into alternating maximal runs."""
    body = tokens[next(i for i, t in enumerate(tokens) if t != pad):]
    assert pad not in body
    runs, current = [], [body[0]]
    for t in body[1:]:
        if (t < keys) == (current[-1] < keys):
            current.append(t)
        else:
            runs.append(tuple(current))
            current = [t]
    runs.append(tuple(current))
    assert len(runs) % 2 == 0 and runs[0][0] < keys
    return list(zip(runs[::2], runs[1::2], strict=True))


@settings(max_examples=25)
@given(k_size=st.integers(1, 3), v_size=st.integers(1, 3), extra=st.integers(0, 40), vary=st.booleans(), seed=seeds)
def test_fuzzy_recall_scores_the_value_motif_of_every_repeated_key_motif(k_size, v_size, extra, vary, seed):
    seq_len = 2 * (k_size + v_size) + extra
    task = get_task("fuzzy_in_context_recall", vocab_size=11, seq_len=seq_len, k_motif_size=k_size,
                    v_motif_size=v_size, vary_key_size=vary)
    keys, pad = 5, 10
    assert task.num_classes == 5
    batch = task.sample(16, seed)
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        pairs = motifs(tokens, keys, pad)
        expected = [IGNORE_INDEX] * (seq_len - sum(len(k) + len(v) for k, v in pairs))
        value_of = {}
        for k, v in pairs:
            assert len(set(k)) == len(k) and len(set(v)) == len(v)
            assert (1 <= len(k) <= k_size) if vary else len(k) == k_size
            assert 1 <= len(v) <= v_size and all(keys <= t < pad for t in v)
            repeated = k in value_of
            assert value_of.setdefault(k, v) == v
            recalled = list(v) if repeated else [IGNORE_INDEX] * len(v)
            expected += [IGNORE_INDEX] * (len(k) - 1) + recalled + [IGNORE_INDEX]
        assert targets == expected
        # The final probe's key is always shown earlier in the sequence (MAD's can be left out).
        assert pairs[-1][0] in [k for k, _ in pairs[:-1]]


def test_fuzzy_recall_places_the_probe_as_mad_does():
    """MAD draws a token position and starts the probe pair at the next pair boundary, so the first pair holds the
    probe's key in about 6% of rows at 32 tokens (MAD's generator: 6.1% of 20,000), not at one boundary in six
    (18.7% when the boundary was uniform)."""
    batch = get_task("fuzzy_in_context_recall", seq_len=32).sample(4000, 0)
    rows = [motifs(row, 7, 15) for row in batch.inputs.tolist()]
    first = sum(pairs[0][0] == pairs[-1][0] for pairs in rows) / len(rows)
    assert 0.04 < first < 0.085


def test_fuzzy_recall_uses_every_motif_size():
    batch = get_task("fuzzy_in_context_recall").sample(64, 0)
    sizes = {(len(k), len(v)) for row in batch.inputs.tolist() for k, v in motifs(row, 7, 15)}
    assert sizes == {(a, b) for a in (1, 2, 3) for b in (1, 2, 3)}
    fixed = get_task("fuzzy_in_context_recall", vary_key_size=False).sample(64, 0)
    assert {len(k) for row in fixed.inputs.tolist() for k, _ in motifs(row, 7, 15)} == {3}


@settings(max_examples=25)
@given(copied=st.integers(1, 8), extra=st.integers(0, 20), vocab=st.integers(4, 12),
       placement=st.sampled_from(["uniform", "mad"]), seed=seeds)
def test_selective_copying_copies_the_scattered_tokens_in_order(copied, extra, vocab, placement, seed):
    seq_len = 2 * copied + 2 + extra
    task = get_task("selective_copying", vocab_size=vocab, seq_len=seq_len, num_tokens_to_copy=copied,
                    placement=placement)
    blank, copy, region = vocab - 2, vocab - 1, seq_len - copied - 1
    assert task.num_classes == vocab - 2
    batch = task.sample(16, seed)
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        scattered = [t for t in tokens[:region] if t != blank]
        assert len(scattered) == copied and all(0 <= t < blank for t in scattered)
        assert tokens[region] == copy and tokens[region + 1 :] == [blank] * copied
        assert targets == [IGNORE_INDEX] * (region + 1) + scattered


def test_selective_copying_placement_uniform_reaches_the_last_slot_mad_always_fills_it():
    uniform = get_task("selective_copying", vocab_size=16, seq_len=64, num_tokens_to_copy=8).sample(4000, 0)
    mad = get_task("selective_copying", vocab_size=16, seq_len=64, num_tokens_to_copy=8, placement="mad").sample(400, 0)
    region = 64 - 8 - 1
    # Uniform over 8-subsets of 55 slots: each slot holds a token with probability 8/55.
    holds = (uniform.inputs[:, :region] != 14).float().mean(dim=0)
    assert (holds - 8 / 55).abs().max() < 0.025
    # MAD's generator never puts a blank after the last token to copy.
    assert (mad.inputs[:, region - 1] != 14).all()


def test_memorization_answers_from_one_fixed_map():
    task = get_task("memorization", vocab_size=16, seq_len=64)
    keys, insert = 7, 15
    assert task.num_classes == 8
    value_of = {}
    for seed in range(3):
        batch = task.sample(32, seed)
        assert (batch.inputs[:, 1::2] == insert).all() and (batch.targets[:, 0::2] == IGNORE_INDEX).all()
        assert (batch.inputs[:, 0::2] < keys).all()
        pairs = zip(batch.inputs[:, 0::2].flatten().tolist(), batch.targets[:, 1::2].flatten().tolist(), strict=True)
        for k, v in pairs:
            assert keys <= v < insert and value_of.setdefault(k, v) == v
    assert len(value_of) == keys and len(set(value_of.values())) == keys  # every key, one value each
    again = get_task("memorization", vocab_size=16, seq_len=64).sample(32, 9)
    assert all(value_of[k] == v for k, v in zip(again.inputs[:, 0::2].flatten().tolist(),
                                                again.targets[:, 1::2].flatten().tolist(), strict=True))
    other = get_task("memorization", vocab_size=16, seq_len=64, map_seed=1)
    assert not torch.equal(other.value_of, task.value_of)


@settings(max_examples=25)
@given(length=st.integers(2, 40), vocab=st.integers(3, 20), noise_vocab=st.integers(0, 6),
       frac=st.sampled_from([0.0, 0.3, 0.9]), seed=seeds)
def test_compression_scores_every_token_but_noise_at_its_own_position(length, vocab, noise_vocab, frac, seed):
    noise_vocab = min(noise_vocab, vocab - 3)
    frac = frac if noise_vocab else 0.0
    task = get_task("compression", vocab_size=vocab, seq_len=length, noise_vocab_size=noise_vocab, frac_noise=frac)
    signal, end = vocab - 1 - noise_vocab, vocab - 1
    assert task.num_classes == signal and task.output_head == "decoder"
    batch = task.sample(16, seed)
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        assert tokens[-1] == end and targets[-1] == IGNORE_INDEX
        for token, target in zip(tokens[:-1], targets[:-1], strict=True):
            assert 0 <= token < end
            assert target == (token if token < signal else IGNORE_INDEX)


def test_compression_noise_follows_frac_noise_and_tokens_are_uniform():
    rows = get_task("compression", vocab_size=12, seq_len=65, noise_vocab_size=3, frac_noise=0.4).sample(400, 3)
    body = rows.inputs[:, :-1]
    noise = body >= 8
    assert abs(noise.float().mean().item() - 0.4) < 0.01
    counts = torch.bincount(body.flatten(), minlength=11).float()
    assert (counts[:8] / counts[:8].mean() - 1).abs().max() < 0.05  # tokens uniform over 0..7
    assert (counts[8:11] / counts[8:11].mean() - 1).abs().max() < 0.05  # noise uniform over 8..10
    clean = get_task("compression", vocab_size=12, seq_len=65).sample(400, 3)
    assert (clean.targets[:, :-1] == clean.inputs[:, :-1]).all() and (clean.inputs[:, :-1] < 11).all()


@pytest.mark.parametrize(("name", "kwargs", "message"), [
    ("compression", {"vocab_size": 2}, r"vocab_size must be >= 3, got 2"),
    ("compression", {"seq_len": 1}, r"seq_len must be >= 2, got 1"),
    ("compression", {"noise_vocab_size": 14}, r"noise_vocab_size must be <= 13, got 14"),
    ("compression", {"frac_noise": 0.5}, r"frac_noise = 0.5 needs noise_vocab_size >= 1, got 0"),
    ("compression", {"noise_vocab_size": 2, "frac_noise": 1.0}, r"frac_noise must be < 1.0, got 1.0"),
    ("in_context_recall", {"seq_len": 9}, r"seq_len must be even, got 9"),
    ("in_context_recall", {"seq_len": 2}, r"seq_len must be >= 4, got 2"),
    ("in_context_recall", {"frac_noise": 0.2}, r"frac_noise = 0.2 needs noise_vocab_size >= 1, got 0"),
    ("in_context_recall", {"noise_vocab_size": 15}, r"noise_vocab_size must be <= 14, got 15"),
    ("noisy_in_context_recall", {"frac_noise": 1.0}, r"frac_noise must be < 1.0, got 1.0"),
    ("fuzzy_in_context_recall", {"k_motif_size": 8}, r"k_motif_size must be <= 7, got 8"),
    ("fuzzy_in_context_recall", {"v_motif_size": 0}, r"v_motif_size must be >= 1, got 0"),
    ("fuzzy_in_context_recall", {"seq_len": 11}, r"seq_len must be >= 12, got 11"),
    ("selective_copying", {"seq_len": 33}, r"seq_len must be >= 34, got 33"),
    ("selective_copying", {"placement": "numpy"},
     r"unknown selective_copying placement 'numpy'; valid: \['uniform', 'mad'\]"),
    ("selective_copying", {"vocab_size": 2}, r"vocab_size must be >= 3, got 2"),
    ("memorization", {"seq_len": 7}, r"seq_len must be even, got 7"),
    ("memorization", {"map_seed": 1.5}, r"map_seed must be an integer"),
])
def test_bad_arguments_name_the_bound(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_task(name, **kwargs)


ONE_ANSWER = "leaves 1 possible answer: every target would be the same"


@pytest.mark.parametrize(("name", "kwargs", "message"), [
    ("in_context_recall", {"vocab_size": 2}, r"vocab_size 2 with noise_vocab_size 0 .*; vocab_size - noise_vocab_size "
                                              r"must be >= 3"),
    ("in_context_recall", {"vocab_size": 18, "noise_vocab_size": 16}, r"vocab_size 18 with noise_vocab_size 16 "),
    ("noisy_in_context_recall", {"vocab_size": 18}, r"vocab_size 18 with noise_vocab_size 16 "),
    ("fuzzy_in_context_recall", {"vocab_size": 3, "k_motif_size": 1, "v_motif_size": 1, "seq_len": 8},
     r"vocab_size 3 .*; vocab_size must be >= 4"),
    ("selective_copying", {"vocab_size": 3, "seq_len": 8, "num_tokens_to_copy": 2}, r"vocab_size must be >= 4"),
    ("memorization", {"vocab_size": 3}, r"vocab_size 3 \(one key, so one value in the map\) .*; vocab_size must be "
                                         r">= 5"),
    ("memorization", {"vocab_size": 4}, r"vocab_size must be >= 5"),
])
def test_arguments_that_leave_one_answer_are_refused(name, kwargs, message):
    """Every target the same answer: chance would be 100%, and a run "solved" at once, having learned nothing."""
    with pytest.raises(ValueError, match=message) as error:
        get_task(name, **kwargs)
    assert ONE_ANSWER in str(error.value)


@pytest.mark.parametrize(("name", "kwargs"), [
    ("in_context_recall", {"vocab_size": 3}), ("in_context_recall", {"vocab_size": 19, "noise_vocab_size": 16}),
    ("fuzzy_in_context_recall", {"vocab_size": 4, "k_motif_size": 1, "v_motif_size": 1, "seq_len": 8}),
    ("selective_copying", {"vocab_size": 4, "seq_len": 8, "num_tokens_to_copy": 2}),
    ("memorization", {"vocab_size": 5}),
])
def test_the_smallest_vocabularies_with_two_answers_are_accepted(name, kwargs):
    batch = get_task(name, **kwargs).sample(256, 0)
    assert len(batch.targets[batch.targets != IGNORE_INDEX].unique()) >= 2

"""State-tracking tasks: targets recomputed independently from the inputs, example by example."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, get_task

lengths = st.integers(1, 40)
seeds = st.integers(0, 2**63 - 1)


@settings(max_examples=30)
@given(seq_len=lengths, seed=seeds)
def test_parity_targets_are_running_xor(seq_len, seed):
    batch = get_task("parity", seq_len=seq_len).sample(8, seed)
    for bits, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        assert set(bits) <= {0, 1}
        assert targets == [sum(bits[: t + 1]) % 2 for t in range(seq_len)]


@settings(max_examples=30)
@given(bounds=st.lists(lengths, min_size=2, max_size=2), seed=seeds)
def test_parity_with_min_seq_len_scores_one_parity_per_example_at_its_own_length(bounds, seed):
    min_len, seq_len = sorted(bounds)
    batch = get_task("parity", seq_len=seq_len, scored="last", min_seq_len=min_len).sample(64, seed)
    for bits, targets, length in zip(batch.inputs.tolist(), batch.targets.tolist(),
                                     batch.slices["seq_len"].tolist(), strict=True):
        assert min_len <= length <= seq_len
        assert targets == [IGNORE_INDEX] * (length - 1) + [sum(bits[:length]) % 2] + [IGNORE_INDEX] * (seq_len - length)


def test_parity_lengths_cover_the_range():
    lengths = get_task("parity", seq_len=40, scored="last", min_seq_len=3).sample(38 * 100, 0).slices["seq_len"]
    assert lengths.min() == 3 and lengths.max() == 40 and (torch.bincount(lengths)[3:] > 0).all()


def test_parity_min_seq_len_needs_the_last_position_scored():
    with pytest.raises(ValueError, match="min_seq_len"):
        get_task("parity", seq_len=40, min_seq_len=3)
    with pytest.raises(ValueError, match="min_seq_len"):
        get_task("parity", seq_len=40, scored="last", min_seq_len=41)


@pytest.mark.parametrize("name", ["parity", "s3", "s5", "a5", "s5_transpositions"])
@settings(max_examples=15)
@given(seq_len=lengths, seed=seeds)
def test_scored_last_keeps_only_the_final_answer(name, seq_len, seed):
    every = get_task(name, seq_len=seq_len).sample(8, seed)
    last = get_task(name, seq_len=seq_len, scored="last").sample(8, seed)
    assert last.inputs.equal(every.inputs)
    assert last.targets[:, -1].equal(every.targets[:, -1])
    assert (last.targets[:, :-1] == IGNORE_INDEX).all()


@settings(max_examples=30)
@given(seq_len=lengths, cycle_length=st.integers(2, 9), seed=seeds)
def test_cycle_nav_scores_the_final_node(seq_len, cycle_length, seed):
    task = get_task("cycle_nav", seq_len=seq_len, cycle_length=cycle_length)
    batch = task.sample(8, seed)
    assert task.num_classes == cycle_length and task.vocab_size >= 3
    for moves, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        node = 0
        for move in moves:
            node = (node + {0: -1, 1: 0, 2: 1}[move]) % cycle_length
        assert targets == [IGNORE_INDEX] * (seq_len - 1) + [node]


def decode_expression(tokens: list[int], modulus: int) -> str:
    symbols = {modulus: "+", modulus + 1: "-", modulus + 2: "*", modulus + 3: "(", modulus + 4: ")", modulus + 5: "="}
    return "".join(str(t) if t < modulus else symbols[t] for t in tokens)


@settings(max_examples=40)
@given(
    name=st.sampled_from(["mod_arith", "mod_arith_brackets"]), half_length=st.integers(1, 24),
    modulus=st.integers(2, 7), mult=st.booleans(), seed=seeds,
)
def test_mod_arith_answer_is_the_expression_value(name, half_length, modulus, mult, seed):
    task = get_task(name, seq_len=2 * half_length, modulus=modulus, mult=mult)
    batch = task.sample(8, seed)
    assert task.vocab_size == modulus + 6 and task.num_classes == modulus
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        text = decode_expression(tokens, modulus)
        assert text.endswith("=") and text.count("=") == 1
        if name == "mod_arith":
            assert "(" not in text and ")" not in text
        if not mult:
            assert "*" not in text
        # Python's eval applies the same precedence; binary operators only, so "--" never occurs.
        assert targets == [IGNORE_INDEX] * (len(tokens) - 1) + [eval(text[:-1]) % modulus]


def test_brackets_appear_and_nest():
    batch = get_task("mod_arith_brackets", seq_len=64, mult=True).sample(64, 0)
    depth = ((batch.inputs == 8).long() - (batch.inputs == 9).long()).cumsum(dim=1)
    assert depth.min() == 0 and depth[:, -1].eq(0).all() and depth.max() >= 3


def is_even(permutation: tuple[int, ...]) -> bool:
    """Parity by cycle decomposition (independent of the inversion count the code uses)."""
    seen, transpositions = set(), 0
    for start in permutation:
        length = 0
        while start not in seen:
            seen.add(start)
            start = permutation[start]
            length += 1
        transpositions += max(length - 1, 0)
    return transpositions % 2 == 0


GROUPS = {
    "s3": (3, False, 6), "s5": (5, False, 120), "a5": (5, True, 60), "s5_transpositions": (5, False, 120),
}


@pytest.mark.parametrize("name", sorted(GROUPS))
@settings(max_examples=10)
@given(seq_len=lengths, seed=seeds)
def test_word_problem_targets_are_prefix_products(name, seq_len, seed):
    degree, alternating, order = GROUPS[name]
    elements = [p for p in itertools.permutations(range(degree)) if not alternating or is_even(p)]
    task = get_task(name, seq_len=seq_len)
    assert task.vocab_size == task.num_classes == order == len(elements)
    batch = task.sample(6, seed)
    for word, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        product = elements[word[0]]
        expected = [word[0]]
        for x in word[1:]:
            product = tuple(product[elements[x][i]] for i in range(degree))  # P_t[i] = P_{t-1}[x_t[i]]
            expected.append(elements.index(product))
        assert targets == expected
        if name == "s5_transpositions":
            assert all(sum(a != b for a, b in zip(elements[x], range(degree), strict=True)) == 2 for x in word)


def test_word_problem_inputs_cover_the_group():
    assert get_task("a5", seq_len=64).sample(64, 0).inputs.unique().numel() == 60
    assert get_task("s5_transpositions", seq_len=64).sample(64, 0).inputs.unique().numel() == 10


@settings(max_examples=30)
@given(half_length=st.integers(2, 30), p_ignore=st.sampled_from([0.0, 0.1, 0.8, 0.98, 1.0]), seed=seeds)
def test_flip_flop_reads_return_the_last_write(half_length, p_ignore, seed):
    batch = get_task("flip_flop", seq_len=2 * half_length, p_ignore=p_ignore).sample(8, seed)
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        instructions, bits = tokens[0::2], tokens[1::2]
        assert instructions[0] == 2 and instructions[-1] == 3
        assert set(instructions) <= {2, 3, 4} and set(bits) <= {0, 1}
        last = None
        for i, (instruction, bit) in enumerate(zip(instructions, bits, strict=True)):
            if instruction == 2:
                last = bit
            if instruction == 3:
                assert bit == last and targets[2 * i] == last
            else:
                assert targets[2 * i] == IGNORE_INDEX
            assert targets[2 * i + 1] == IGNORE_INDEX


def test_flip_flop_instruction_mix_follows_p_ignore():
    inputs = get_task("flip_flop", seq_len=512, p_ignore=0.8).sample(64, 1).inputs[:, 2:-2:2]
    fractions = torch.stack([(inputs == token).double().mean() for token in (2, 3, 4)])
    assert torch.allclose(fractions, torch.tensor([0.1, 0.1, 0.8], dtype=torch.float64), atol=0.01)

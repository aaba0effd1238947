"""RegBench: the automata are drawn as the authors draw them, every sequence is checked against the automaton it was
sampled from (each string a path from the start state, every allowed set the state's edges, the targets the next
symbols), the held-out languages never reach training, and one language has one key."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loglinear.synthetics import IGNORE_INDEX, get_task
from loglinear.synthetics.automata import Automata, language_key, sample_automata
from loglinear.synthetics.regbench import HELD_OUT, language_keys
from loglinear.synthetics.seeding import make_generator


def edges_of(automata: Automata, row: int) -> list[dict[int, int]]:
    counts = automata.counts[row].tolist()
    return [dict(zip(automata.symbols[row, s, :c].tolist(), automata.targets[row, s, :c].tolist(), strict=True))
            for s, c in enumerate(counts)]


def test_automata_are_drawn_as_the_authors_draw_them():
    automata = sample_automata(2000, (4, 12), (4, 18), 18, 3, make_generator(0))
    assert automata.states.min() == 4 and automata.states.max() == 12
    for row in range(200):
        states = int(automata.states[row])
        edges = edges_of(automata, row)
        assert all(1 <= len(e) <= 3 for e in edges[:states]) and not any(edges[states:])
        assert all(s not in e.values() and len(set(e.values())) == len(e) for s, e in enumerate(edges))
        assert all(0 <= t < states for e in edges for t in e.values())
    assert (torch.bincount(automata.counts[automata.counts > 0], minlength=4)[1:] > 0).all()  # 1, 2 and 3 edges
    used = [len({a for e in edges_of(automata, r) for a in e}) for r in range(2000)]
    assert max(used) > 12 and min(used) <= 4  # alphabets from 4 to 18 symbols


def walk_back(task, tokens: list[int], targets: list[int], allowed: list[int], edges: list[dict[int, int]]) -> int:
    """Check one sequence against its automaton; returns its number of strings."""
    separator, padding = task.vocab_size - 2, task.vocab_size - 1
    state, strings, length = 0, 1, 0
    sequence = tokens + [None]
    for t, token in enumerate(tokens):
        if token == padding:
            assert all(x == padding for x in tokens[t:]), "padding only at the end"
            break
        if token == separator:
            assert 1 <= length <= task.max_string_len
            state, strings, length = 0, strings + 1, 0
        else:
            assert token in edges[state], (t, token, edges[state])  # the string is a path of the automaton
            state, length = edges[state][token], length + 1
        following = sequence[t + 1]
        if following is None and targets[t] != IGNORE_INDEX:  # the token past the inputs: a next symbol too
            following = targets[t]
            assert following in edges[state]
        if following is not None and following < separator:
            assert targets[t] == following and allowed[t] == sum(1 << a for a in edges[state]), t
        else:
            assert targets[t] == IGNORE_INDEX and allowed[t] == 0
    return strings


@settings(max_examples=20, deadline=None)
@given(seq_len=st.integers(8, 300), vocab=st.integers(6, 24), strings=st.integers(1, 6), longest=st.integers(1, 20),
       held_out=st.booleans(), seed=st.integers(0, 2**63 - 1))
def test_every_sequence_is_strings_of_its_automaton(seq_len, vocab, strings, longest, held_out, seed):
    task = get_task("regbench", seq_len=seq_len, vocab_size=vocab, min_strings=strings, max_strings=strings + 2,
                    max_string_len=longest, automata="held_out" if held_out else "train")
    batch = task.sample(8, seed)
    automata = task._draw(8, make_generator(seed))  # the first draws of the same generator: the batch's automata
    assert all((key % HELD_OUT == 0) == held_out for key in language_keys(automata))
    for row in range(8):
        count = walk_back(task, batch.inputs[row].tolist(), batch.targets[row].tolist(), batch.allowed[row].tolist(),
                          edges_of(automata, row))
        assert count <= strings + 2
        if batch.inputs[row, -1] == task.vocab_size - 1:  # not cut at seq_len: every string is there
            assert count >= strings


def test_a_sequence_that_fits_has_all_its_strings_and_is_padded():
    task = get_task("regbench")
    batch = task.sample(64, 3)
    lengths = (batch.inputs != 19).sum(dim=1)
    assert lengths.max() < 1024 and (batch.inputs[:, -1] == 19).all()  # 949 tokens at most: never cut
    separators = (batch.inputs == 18).sum(dim=1)
    assert separators.min() >= 9 and separators.max() <= 18  # 10 .. 19 strings


def renumbered(edges: list[dict[int, int]], order: list[int]) -> tuple[list, list, list]:
    """The automaton with state s renamed order[s] (order[0] = 0: the start stays), as symbols, targets, counts."""
    moved = [None] * len(edges)
    for s, e in enumerate(edges):
        moved[order[s]] = {a: order[t] for a, t in e.items()}
    return [list(e) for e in moved], [list(e.values()) for e in moved], [len(e) for e in moved]


def test_one_language_has_one_key_and_another_language_another():
    # a b* (state 1 loops through 2 on b): states 1 and 2 read the same futures, so 2 states suffice
    edges = [{0: 1}, {1: 2}, {1: 1}]
    small = [{0: 1}, {1: 1}]
    key = language_key(*renumbered(edges, [0, 1, 2]))
    assert key == language_key(*renumbered(edges, [0, 2, 1]))  # states renumbered
    assert key == language_key(*renumbered(small, [0, 1]))  # minimised
    assert key == language_key(*renumbered([*edges, {0: 0}], [0, 1, 2, 3]))  # an unreachable state added
    assert key != language_key(*renumbered([{0: 1}, {2: 1}], [0, 1]))  # a c*
    assert key != language_key(*renumbered([{0: 1}, {1: 0}], [0, 1]))  # (a b)*


def test_about_one_language_in_ten_is_held_out_and_each_side_draws_only_its_own():
    drawn = language_keys(sample_automata(2000, (4, 12), (4, 18), 18, 3, make_generator(5)))
    assert 0.05 < sum(key % HELD_OUT == 0 for key in drawn) / len(drawn) < 0.15
    for side, held in (("train", False), ("held_out", True)):
        task = get_task("regbench", seq_len=64, automata=side)
        assert all((key % HELD_OUT == 0) == held for key in language_keys(task._draw(300, make_generator(6))))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"vocab_size": 65}, r"vocab_size must be <= 64, got 65"),
    ({"min_states": 3}, r"min_states must be >= 4, got 3"),
    ({"max_states": 3}, r"max_states must be >= 4, got 3"),
    ({"min_alphabet": 2}, r"min_alphabet must be >= 3, got 2"),
    ({"vocab_size": 5}, r"min_alphabet must be <= 3, got 4"),
    ({"max_strings": 5}, r"max_strings must be >= 10, got 5"),
    ({"automata": "test"}, r"automata must be one of \['train', 'held_out'\], got 'test'"),
    ({"max_string_len": 0}, r"max_string_len must be >= 1, got 0"),
])
def test_impossible_settings_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_task("regbench", **kwargs)

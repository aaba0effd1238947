"""RegBench: in-context language learning (Akyürek, Wang, Kim, Andreas, ICML 2024, "In-Context Language Learning:
Architectures and Algorithms", arXiv 2401.12973; code berlino/seq_icl). Each sequence is strings of one random
probabilistic automaton, and the model must infer the language in context. Written from the paper's definition and
the authors' generator (`src/dataloaders/dfa.py`), vectorised over the batch; docs/tasks.md lists every departure."""

from __future__ import annotations

import math

import torch

from loglinear.synthetics.arguments import check_answers, check_int
from loglinear.synthetics.automata import Automata, language_key, sample_automata, walk
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.task import Task

AUTOMATA = ("train", "held_out")
HELD_OUT = 10
"""One language in HELD_OUT (those whose `language_key` is a multiple of it) is held out: `automata: train` never
draws one, `automata: held_out` draws only them, so a test on held-out automata tests languages no training
sequence came from."""
MAX_VOCAB = 64
"""The bitmask of allowed next tokens is an int64: symbols 0 .. 61 and the two special tokens."""


class RegBench(Task):
    """Strings of a random probabilistic automaton, separated, scored on every next symbol.

    Per example, with V = vocab_size (symbols 0 .. V-3, separator V-2, padding V-1): an automaton from
    `sample_automata` (states uniform in min_states .. max_states, an alphabet of min_alphabet .. V-2 symbols,
    1 .. max_edges edges per state into other states), redrawn until its language is on the `automata` side of the
    held-out split (`HELD_OUT`); a number of strings uniform in min_strings .. max_strings, each of a length uniform
    in 1 .. max_string_len, each a walk from the start state that picks every next symbol uniformly among the
    current state's edges. The sequence is the strings joined by the separator, cut at seq_len + 1 tokens, padded
    with the padding token; inputs are its first seq_len tokens, and the target at t is token t + 1 where that is a
    symbol (a separator or padding is not scored, as the authors do).

    `allowed` (the batch's per-position bitmask) names every symbol the automaton allows after the tokens so far:
    accuracy counts an argmax in it as right, and the total variation distance is to the uniform distribution over
    it, the automaton's own next-symbol distribution. Example (symbols a = 0, b = 1, separator |)::

        inputs    a b a | b a
        targets   b a - b a .
    """

    name = "regbench"

    def __init__(self, seq_len: int = 1024, vocab_size: int = 20, min_states: int = 4, max_states: int = 12,
                 min_alphabet: int = 4, max_edges: int = 3, min_strings: int = 10, max_strings: int = 19,
                 max_string_len: int = 49, automata: str = "train") -> None:
        self.seq_len = check_int("seq_len", seq_len, minimum=2)
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=4, maximum=MAX_VOCAB)
        self.max_edges = check_int("max_edges", max_edges, minimum=1)
        self.min_states = check_int("min_states", min_states, minimum=max_edges + 1)
        self.max_states = check_int("max_states", max_states, minimum=min_states)
        self.min_alphabet = check_int("min_alphabet", min_alphabet, minimum=max_edges, maximum=vocab_size - 2)
        self.min_strings = check_int("min_strings", min_strings, minimum=1)
        self.max_strings = check_int("max_strings", max_strings, minimum=min_strings)
        self.max_string_len = check_int("max_string_len", max_string_len, minimum=1)
        if automata not in AUTOMATA:
            raise ValueError(f"automata must be one of {list(AUTOMATA)}, got {automata!r}")
        self.automata = automata
        self.num_classes = check_answers(vocab_size - 2, "vocab_size", "needs vocab_size >= 4")
        self._separator, self._padding = vocab_size - 2, vocab_size - 1

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, strings = batch_size, self.max_strings
        automata = self._draw(rows, generator)
        count = torch.randint(self.min_strings, strings + 1, (rows,), generator=generator)
        lengths = torch.randint(1, self.max_string_len + 1, (rows, strings), generator=generator)
        lengths.masked_fill_(torch.arange(strings) >= count[:, None], 0)
        read, allowed = walk(automata, lengths, generator)  # (B, W, L)

        # Lay the strings out one after another, a separator after each but the last, in seq_len + 1 tokens plus a
        # spare last column that takes every write past them.
        width = self.seq_len + 1
        offsets = (lengths + 1).cumsum(dim=1) - (lengths + 1)
        at = offsets[..., None] + torch.arange(read.shape[2])
        at = torch.where(torch.arange(read.shape[2]) < lengths[..., None], at, width).clamp_(max=width)
        tokens = torch.full((rows, width + 1), self._padding, dtype=torch.int64)
        masks = torch.zeros(rows, width + 1, dtype=torch.int64)
        tokens.scatter_(1, at.view(rows, -1), read.view(rows, -1))
        masks.scatter_(1, at.view(rows, -1), allowed.view(rows, -1))
        separators = torch.where(torch.arange(strings) < count[:, None] - 1, offsets + lengths, width).clamp_(max=width)
        tokens.scatter_(1, separators, self._separator)
        following = tokens[:, 1:width]
        symbol = following < self._separator
        targets = torch.where(symbol, following, IGNORE_INDEX)
        return Batch(tokens[:, : self.seq_len], targets, {"seq_len": torch.full((rows,), self.seq_len)},
                     allowed=torch.where(symbol, masks[:, 1:width], 0))

    def _draw(self, rows: int, generator: torch.Generator) -> Automata:
        """`rows` automata whose languages are on this task's side of the held-out split, in the order drawn."""
        held_out = self.automata == "held_out"
        share = 1 / HELD_OUT if held_out else 1 - 1 / HELD_OUT
        kept: list[Automata] = []
        needed = rows
        while needed:
            drawn = sample_automata(math.ceil(1.5 * needed / share) + 4, (self.min_states, self.max_states),
                                    (self.min_alphabet, self.vocab_size - 2), self.vocab_size - 2, self.max_edges,
                                    generator)
            on_side = torch.tensor([(key % HELD_OUT == 0) == held_out for key in language_keys(drawn)])
            chosen = on_side.nonzero()[:needed, 0]
            kept.append(drawn.rows(chosen))
            needed -= len(chosen)
        return Automata(*(torch.cat(parts) for parts in zip(*(
            (a.symbols, a.targets, a.counts, a.states) for a in kept), strict=True)))


def language_keys(automata: Automata) -> list[int]:
    """`language_key` of each automaton of the batch."""
    symbols, targets, counts = automata.symbols.tolist(), automata.targets.tolist(), automata.counts.tolist()
    return [language_key(s, t, c) for s, t, c in zip(symbols, targets, counts, strict=True)]


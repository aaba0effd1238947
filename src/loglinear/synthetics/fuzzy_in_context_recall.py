"""Fuzzy in-context recall: keys and values are motifs of several tokens, as MAD defines it (Poli et al. 2024)."""

from __future__ import annotations

import random

import torch

from loglinear.synthetics.arguments import check_answers, check_bool, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.task import Task


class FuzzyInContextRecall(Task):
    """In-context recall where a key is 1 .. k_motif_size tokens and a value 1 .. v_motif_size tokens.

    With V = vocab_size and S = V - 1: key tokens are [0, S/2), value tokens [S/2, S), V-1 pads the
    start of the sequence. A key is an ordered tuple of distinct key tokens (a motif), its length
    uniform in 1 .. k_motif_size (always k_motif_size with `vary_key_size: false`, MAD's test
    setting); a value likewise from the value tokens, its length uniform in 1 .. v_motif_size. Per
    example each key motif keeps the value motif it got first. The sequence is a run of `key value`
    pairs with uniform keys, one of them the probe pair, then the probe pair again at the end,
    left-padded to T. The probe goes where MAD's generator puts it: a token position is drawn
    uniformly in [0, T - 2 * probe length) and the probe pair starts at the first pair boundary at or
    after it (so the first pair is the probe only when position 0 is drawn); a pair whose key happens
    to be the probe's key before then takes its place. Pairs are added while the length (the probe
    pair included once placed) stays under T - probe length - (k_motif_size + v_motif_size). Scored:
    every pair whose key motif appeared before, including the final probe: the target at each
    position from the key's last token to the value's last-but-one token is the next value token (so
    a value of m tokens is m scored positions). Example, V = 9 (keys 0..3, values 4..7, pad 8)::

        inputs   8 8 0 2 5 1 6 7 0 2 5      keys (0 2), (1), (0 2); values (5), (6 7), (5)
        targets  - - - - - - - - - 5 -

    MAD's generator never inserts the probe pair when the pairs stop before the drawn position, while
    the final probe's value is still scored; here the probe pair then replaces the last pairs (as
    many as its room needs), so it is always in the context. Like `in_context_recall`, only the
    recalled values are scored, in training too. `num_classes` is the number of value tokens. The
    sampler is sequential (one pair at a time, as the layout is), on a `random.Random` of its own
    seeded from the batch's generator (never the global one).
    """

    name = "fuzzy_in_context_recall"

    def __init__(self, vocab_size: int = 16, seq_len: int = 128, k_motif_size: int = 3, v_motif_size: int = 3,
                 vary_key_size: bool = True) -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=3)
        signal = vocab_size - 1
        self._keys = signal // 2
        self.num_classes = check_answers(signal - signal // 2, f"vocab_size {vocab_size}", "vocab_size must be >= 4")
        self.k_motif_size = check_int("k_motif_size", k_motif_size, minimum=1, maximum=self._keys)
        self.v_motif_size = check_int("v_motif_size", v_motif_size, minimum=1, maximum=self.num_classes)
        self.seq_len = check_int("seq_len", seq_len, minimum=2 * (k_motif_size + v_motif_size))
        self.vary_key_size = check_bool("vary_key_size", vary_key_size)

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rng = random.Random(int(torch.randint(0, 2**62, (), generator=generator)))
        inputs, targets = [], []
        for _ in range(batch_size):
            tokens, scored = self._example(rng)
            pad = self.seq_len - len(tokens)
            inputs.append([self.vocab_size - 1] * pad + tokens)
            recalled = [nxt if hit else IGNORE_INDEX for nxt, hit in zip(tokens[1:], scored[1:], strict=True)]
            targets.append([IGNORE_INDEX] * pad + recalled + [IGNORE_INDEX])
        return self._batch(torch.tensor(inputs), torch.tensor(targets))

    def _example(self, rng: random.Random) -> tuple[list[int], list[bool]]:
        """The tokens of one example (unpadded) and, per token, whether it is a recalled value token."""
        key_tokens, value_tokens = range(self._keys), range(self._keys, self._keys + self.num_classes)

        def key() -> tuple[int, ...]:
            size = rng.randint(1, self.k_motif_size) if self.vary_key_size else self.k_motif_size
            return tuple(rng.sample(key_tokens, size))

        def value() -> tuple[int, ...]:
            return tuple(rng.sample(value_tokens, rng.randint(1, self.v_motif_size)))

        probe = key()
        value_of = {probe: value()}
        probe_length = len(probe) + len(value_of[probe])
        limit = self.seq_len - probe_length - (self.k_motif_size + self.v_motif_size)
        at = rng.randrange(max(self.seq_len - 2 * probe_length, 1))
        pairs, length, placed = [], 0, False
        while length < limit:
            k = probe if not placed and length >= at else key()
            if k not in value_of:
                value_of[k] = value()
            placed = placed or k == probe
            pairs.append(k)
            length += len(k) + len(value_of[k])
        if not placed:
            while length + 2 * probe_length > self.seq_len:
                length -= len(pairs[-1]) + len(value_of[pairs[-1]])
                pairs.pop()
            pairs.append(probe)
        pairs.append(probe)
        tokens, scored, seen = [], [], set()
        for k in pairs:
            v = value_of[k]
            tokens += [*k, *v]
            scored += [False] * len(k) + [k in seen] * len(v)
            seen.add(k)
        return tokens, scored

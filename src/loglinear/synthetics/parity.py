"""Parity: the running XOR of a bit string."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.scoring import check_scored, keep_scored
from loglinear.synthetics.task import Task


class Parity(Task):
    """Inputs are uniform random bits (token = bit); the target at every position t is the parity
    inputs[0] XOR ... XOR inputs[t], so one sequence scores every prefix length 1..T.

    The regular-language task of Deletang et al. 2023, "Neural Networks and the Chomsky
    Hierarchy" (who score only the final parity), as used by Grazzi et al. 2025, "Unlocking
    State-Tracking in Linear RNNs Through Negative Eigenvalues". Example::

        inputs   1 0 1 1 0
        targets  1 1 0 1 1

    `vocab_size` = `num_classes` = 2. `scored="last"` scores only the final parity (Deletang et al.'s
    protocol; a test set at length L then measures the parity of L bits exactly), `"every"` (default)
    every prefix: training at length T then teaches every length 1..T. `min_seq_len` (with `"last"`)
    gives each example its own length L, uniform in min_seq_len..seq_len, scored at position L - 1 only:
    Grazzi et al.'s training lengths 3-40, one parity per sequence (the bits after L - 1 are never read by a
    causal model, so they stand for the padding; the `seq_len` slice is L).
    """

    name = "parity"

    def __init__(self, seq_len: int = 64, scored: str = "every", min_seq_len: int | None = None) -> None:
        self.seq_len = check_int("seq_len", seq_len, minimum=1)
        self.scored = check_scored(scored)
        self.min_seq_len = min_seq_len
        if min_seq_len is not None:
            check_int("min_seq_len", min_seq_len, minimum=1, maximum=seq_len)
            if scored != "last":
                raise ValueError(f"min_seq_len needs scored='last' (one parity per example), got scored={scored!r}")
        self.vocab_size = self.num_classes = 2

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        bits = torch.randint(0, 2, (batch_size, self.seq_len), generator=generator)
        parities = bits.cumsum(dim=1).remainder_(2)
        if self.min_seq_len is None:
            return self._batch(bits, keep_scored(parities, self.scored))
        lengths = torch.randint(self.min_seq_len, self.seq_len + 1, (batch_size,), generator=generator)
        rows, last = torch.arange(batch_size), lengths - 1
        targets = torch.full_like(bits, IGNORE_INDEX)
        targets[rows, last] = parities[rows, last]
        return self._batch(bits, targets, seq_len=lengths)

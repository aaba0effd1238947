"""Flip-flop language: remember the last written bit across ignore instructions."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_even, check_float, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.task import Task

WRITE, READ, IGNORE = 2, 3, 4
"""Instruction tokens; tokens 0 and 1 are the bits."""


class FlipFlop(Task):
    """Flip-flop language modelling (Liu et al. 2023, "Exposing Attention Glitches with
    Flip-Flop Language Modeling").

    A sequence is `seq_len / 2` pairs (instruction, bit). Instructions: w (write), r (read),
    i (ignore), token 2 / 3 / 4; bits are tokens 0 / 1. The first instruction is always w and the
    last always r; the others are i with probability `p_ignore` and w or r with probability
    (1 - p_ignore) / 2 each. The bits of w and i are uniform; the bit after r must equal the bit
    of the latest w. Only those bits are scored: the target at each r position is the bit that
    follows it (the model must produce it on seeing r). Example::

        inputs   w 1 i 0 r 1 w 0 i 1 r 0       tokens 2 1 4 0 3 1 2 0 4 1 3 0
        targets  - - - - 1 - - - - - 0 -

    Liu et al. train on p_ignore = 0.8 and test on sparse (0.98) and dense (0.1) sequences: an
    evaluation set is one override away (`{p_ignore: 0.98}`). `vocab_size` = 5, `num_classes` = 2.
    """

    name = "flip_flop"

    def __init__(self, seq_len: int = 64, p_ignore: float = 0.8) -> None:
        self.seq_len = check_even("seq_len", check_int("seq_len", seq_len, minimum=4))
        self.p_ignore = check_float("p_ignore", p_ignore, minimum=0.0, maximum=1.0)
        self.vocab_size, self.num_classes = 5, 2

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        pairs = self.seq_len // 2
        u = torch.rand(batch_size, pairs, generator=generator)
        half_rest = (1.0 - self.p_ignore) / 2
        instructions = torch.where(u < self.p_ignore, IGNORE, torch.where(u < self.p_ignore + half_rest, WRITE, READ))
        instructions[:, 0], instructions[:, -1] = WRITE, READ
        bits = torch.randint(0, 2, (batch_size, pairs), generator=generator)
        # Index of the latest write at or before each pair (pair 0 is always a write).
        pair_index = torch.arange(pairs).expand(batch_size, -1)
        latest_write = torch.where(instructions == WRITE, pair_index, 0).cummax(dim=1).values
        is_read = instructions == READ
        bits = torch.where(is_read, bits.gather(1, latest_write), bits)
        inputs = torch.stack([instructions, bits], dim=2).view(batch_size, self.seq_len)
        targets = torch.full((batch_size, pairs, 2), IGNORE_INDEX, dtype=torch.int64)
        targets[:, :, 0] = torch.where(is_read, bits, IGNORE_INDEX)
        return self._batch(inputs, targets.view(batch_size, self.seq_len))

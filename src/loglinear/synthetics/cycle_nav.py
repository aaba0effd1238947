"""Cycle navigation: where an agent ends up after moving left, right or staying on a cycle."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.task import Task


class CycleNavigation(Task):
    """An agent starts at node 0 of a cycle of `cycle_length` nodes (5 by default); each input is
    a move, token 0 = step -1, token 1 = stay, token 2 = step +1, uniform at random. Only the last
    position is scored: its target is the final node, (sum of moves) mod cycle_length.

    The regular-language task of Deletang et al. 2023, "Neural Networks and the Chomsky
    Hierarchy" (cycle of 5, moves -1 / 0 / +1), also used by Grazzi et al. 2025. Example
    (cycle_length 5)::

        inputs   2 2 0 1 2 2 2
        moves   +1 +1 -1 0 +1 +1 +1   -> node 4
        targets  -  -  -  -  -  -  4

    `num_classes` = cycle_length; `vocab_size` = max(3, cycle_length), so the output layer can
    name every node.
    """

    name = "cycle_nav"

    def __init__(self, seq_len: int = 64, cycle_length: int = 5) -> None:
        self.seq_len = check_int("seq_len", seq_len, minimum=1)
        self.cycle_length = check_int("cycle_length", cycle_length, minimum=2)
        self.num_classes = cycle_length
        self.vocab_size = max(3, cycle_length)

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        moves = torch.randint(0, 3, (batch_size, self.seq_len), generator=generator)
        targets = torch.full_like(moves, IGNORE_INDEX)
        targets[:, -1] = (moves - 1).sum(dim=1).remainder(self.cycle_length)
        return self._batch(moves, targets)

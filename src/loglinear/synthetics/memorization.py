"""Memorisation of a fixed key-value map, as MAD defines it (Poli et al. 2024)."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_answers, check_even, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.seeding import make_generator
from loglinear.synthetics.task import Task


class Memorization(Task):
    """Recall values from a key-value map that lives in the weights, not in the sequence.

    With V = vocab_size and S = V - 1: keys are tokens [0, S/2), values [S/2, S), V-1 is the insert
    token. The map gives each key its own value (a uniformly random one-to-one map, drawn once from
    `map_seed`, so every batch, training and test alike, uses the same map). A sequence is T/2
    pairs `k_j insert`, k_j uniform over the keys; the target at each insert token is the value of
    the key before it (T/2 scored positions). Example, V = 8 (keys 0..2, values 3..6, insert 7),
    map 0 -> 5, 1 -> 3, 2 -> 6::

        inputs   1 7 2 7 1 7
        targets  - 3 - 6 - 3

    MAD draws its map from the run's seed (12345 in its configs); here `map_seed` names it, so that
    runs with several data seeds can share one map or each draw their own. `num_classes` is the
    number of values.
    """

    name = "memorization"

    def __init__(self, vocab_size: int = 256, seq_len: int = 32, map_seed: int = 12345) -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=3)
        self.seq_len = check_even("seq_len", check_int("seq_len", seq_len, minimum=2))
        self.map_seed = check_int("map_seed", map_seed)
        signal = vocab_size - 1
        self._keys, self.num_classes = signal // 2, signal - signal // 2
        check_answers(self._keys, f"vocab_size {vocab_size} (one key, so one value in the map)",
                      "vocab_size must be >= 5")
        self.value_of = torch.randperm(self.num_classes, generator=make_generator(map_seed))[: self._keys] + self._keys
        """`(keys,)`: the value token of each key token."""

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        pairs = self.seq_len // 2
        keys = torch.randint(0, self._keys, (batch_size, pairs), generator=generator)
        inputs = torch.stack([keys, torch.full_like(keys, self.vocab_size - 1)], dim=2)
        targets = torch.stack([torch.full_like(keys, IGNORE_INDEX), self.value_of[keys]], dim=2)
        return self._batch(inputs.view(batch_size, self.seq_len), targets.view(batch_size, self.seq_len))

"""Compositional MQAR: zoology's MQAR with two-token keys on a grid (HazyResearch/zoology, `compositional_mqar`,
restated and vectorised here)."""

from __future__ import annotations

import math

import torch

from loglinear.synthetics.arguments import check_bool, check_float, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.sampling import sample_distinct, weighted_order_without_replacement
from loglinear.synthetics.task import Task


class CompositionalMQAR(Task):
    """Multi-query associative recall whose keys are pairs of tokens (a, b), neither of which alone decides the value.

    With V = vocab_size, third = V // 3, T = seq_len, N = num_kv_pairs = g^2:

    - g distinct first tokens from [1, third), g distinct second tokens from [third, 2 * third); the
      N keys are all g x g pairs (a, b) (a grid: each a goes with every b, so neither token alone
      names a value), in a uniformly random order; N distinct values from [2 * third, V).
    - context, positions 0 .. 3N-1: the triples `a b v`.
    - query region: (T - 3N) // 3 slots at offsets 3s from position 3N; each key reappears once as
      `a b` in a slot drawn as in `mqar` (power law with exponent `power_a`); the target at its
      second token is its value (the N scored positions). Other positions are uniform tokens
      from [0, V) (`random_non_queries`) or 0.

    Example, V = 30 (first tokens 1..9, second 10..19, values 20..29), T = 24, N = 4 (g = 2), keys
    from {3, 7} x {12, 15}::

        inputs   7 15 21 3 12 28 3 15 20 7 12 24 | 3 15 f  7 12 f ...
        targets  -  -  - -  -  - -  -  - -  -  - | - 20 -  - 24 - ...

    Needs N a perfect square, 6N <= T and enough tokens in each third. `num_classes` = V - 2 * third.
    """

    name = "compositional_mqar"

    def __init__(self, vocab_size: int = 8192, seq_len: int = 256, num_kv_pairs: int = 4, power_a: float = 0.01,
                 random_non_queries: bool = True) -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=7)
        self.num_kv_pairs = check_int("num_kv_pairs", num_kv_pairs, minimum=1)
        self._grid = math.isqrt(num_kv_pairs)
        if self._grid**2 != num_kv_pairs:
            raise ValueError(f"num_kv_pairs must be a perfect square (1, 4, 9, 16, ...), got {num_kv_pairs}")
        self.seq_len = check_int("seq_len", seq_len, minimum=6 * num_kv_pairs)
        self._third = vocab_size // 3
        self.num_classes = vocab_size - 2 * self._third
        if self._grid > self._third - 1 or num_kv_pairs > self.num_classes:
            raise ValueError(f"vocab_size = {vocab_size} is too small for num_kv_pairs = {num_kv_pairs}: needs "
                             f"vocab_size // 3 - 1 >= {self._grid} first tokens and {num_kv_pairs} values")
        self.power_a = check_float("power_a", power_a)
        self.random_non_queries = check_bool("random_non_queries", random_non_queries)
        space = (seq_len - 3 * num_kv_pairs) // 3
        self._inverse_weights = torch.arange(1, space + 1, dtype=torch.float64).pow(1 - power_a).float()

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, pairs, grid, third = batch_size, self.num_kv_pairs, self._grid, self._third
        firsts = sample_distinct(rows, grid, (third - 1,), generator)[0] + 1
        seconds = sample_distinct(rows, grid, (third,), generator)[0] + third
        values = sample_distinct(rows, pairs, (self.num_classes,), generator)[0] + 2 * third
        order = torch.rand(rows, pairs, generator=generator).argsort(dim=1)
        firsts = firsts.repeat_interleave(grid, dim=1).gather(1, order)
        seconds = seconds.repeat(1, grid).gather(1, order)
        if self.random_non_queries:
            inputs = torch.randint(0, self.vocab_size, (rows, self.seq_len), generator=generator)
        else:
            inputs = torch.zeros(rows, self.seq_len, dtype=torch.int64)
        context = 3 * pairs
        inputs[:, 0:context:3], inputs[:, 1:context:3], inputs[:, 2:context:3] = firsts, seconds, values
        gaps = weighted_order_without_replacement(self._inverse_weights.expand(rows, -1), pairs, generator)
        at = context + 3 * gaps
        inputs.scatter_(1, at, firsts).scatter_(1, at + 1, seconds)
        targets = torch.full((rows, self.seq_len), IGNORE_INDEX, dtype=torch.int64).scatter_(1, at + 1, values)
        return self._batch(inputs, targets, num_kv_pairs=torch.full((rows,), pairs))

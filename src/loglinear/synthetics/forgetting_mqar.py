"""Forgetting MQAR: zoology's MQAR where some keys get a new value before the queries (HazyResearch/zoology,
`forgetting_mqar`, restated and vectorised here)."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_bool, check_float, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.mqar import _slot_inverse_weights
from loglinear.synthetics.sampling import sample_distinct, weighted_order_without_replacement
from loglinear.synthetics.task import Task


class ForgettingMQAR(Task):
    """Multi-query associative recall whose answer is each key's latest value.

    With V = vocab_size, T = seq_len, N = num_kv_pairs, U = num_updates:

    - keys: N distinct tokens from [1, V/2); original values: N distinct tokens from [V/2, V).
    - U of the N keys (a uniform U-subset, in random order) get a new value, uniform over the values
      other than that key's own original value (other keys' values are allowed).
    - context: the N original pairs `k v`, then the U update pairs `k v'` (positions 0 .. 2(N+U)-1).
    - query region: every key reappears once, in (T - 2(N+U)) // 2 even slots drawn as in `mqar`
      (power law with exponent `power_a`); the target there is the key's latest value (v' for an
      updated key, v otherwise); the N query positions are the only scored ones. Other positions of
      the query region are uniform tokens from [0, V) (`random_non_queries`) or 0.

    Example, V = 16 (keys 1..7, values 8..15), T = 14, N = 2, U = 1; key 3 updated from 12 to 10::

        inputs   3 12 5 9 3 10 5 f 3 f f f f f
        targets  -  - - - -  - 9 - 10 - - - - -

    zoology's generator picks each new value to differ from the original value of the j-th key but
    assigns it to a different key chosen independently, so an "update" can give a key its own value
    back; here a new value always differs from the value it replaces. Needs 2(N+U) + 2N <= T,
    U <= N and N <= V/2 - 1. `num_classes` is the number of values, V - V/2.
    """

    name = "forgetting_mqar"

    def __init__(self, vocab_size: int = 8192, seq_len: int = 256, num_kv_pairs: int = 8, num_updates: int = 4,
                 power_a: float = 0.01, random_non_queries: bool = True) -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=6)
        self.num_kv_pairs = check_int("num_kv_pairs", num_kv_pairs, minimum=1, maximum=vocab_size // 2 - 1)
        self.num_updates = check_int("num_updates", num_updates, minimum=0, maximum=num_kv_pairs)
        needed = 2 * (num_kv_pairs + num_updates) + 2 * num_kv_pairs
        self.seq_len = check_int("seq_len", seq_len, minimum=needed)
        self.power_a = check_float("power_a", power_a)
        self.random_non_queries = check_bool("random_non_queries", random_non_queries)
        self.num_classes = vocab_size - vocab_size // 2
        self._context = 2 * (num_kv_pairs + num_updates)
        space = (seq_len - self._context) // 2
        self._inverse_weights = _slot_inverse_weights(seq_len, num_kv_pairs + num_updates, space, power_a)

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, pairs, updates, half = batch_size, self.num_kv_pairs, self.num_updates, self.vocab_size // 2
        keys, values = sample_distinct(rows, pairs, (half - 1, self.num_classes), generator).unbind(0)
        keys, values = keys + 1, values + half
        latest = values.clone()
        if self.random_non_queries:
            inputs = torch.randint(0, self.vocab_size, (rows, self.seq_len), generator=generator)
        else:
            inputs = torch.zeros(rows, self.seq_len, dtype=torch.int64)
        inputs[:, 0 : 2 * pairs : 2], inputs[:, 1 : 2 * pairs : 2] = keys, values
        if updates:
            updated = sample_distinct(rows, updates, (pairs,), generator)[0]
            shift = torch.randint(0, self.num_classes - 1, (rows, updates), generator=generator) + half
            new = shift + (shift >= values.gather(1, updated)).long()  # skips the key's own value
            latest.scatter_(1, updated, new)
            inputs[:, 2 * pairs : self._context : 2] = keys.gather(1, updated)
            inputs[:, 2 * pairs + 1 : self._context : 2] = new
        gaps = weighted_order_without_replacement(self._inverse_weights.expand(rows, -1), pairs, generator)
        at = self._context + 2 * gaps
        inputs.scatter_(1, at, keys)
        targets = torch.full((rows, self.seq_len), IGNORE_INDEX, dtype=torch.int64).scatter_(1, at, latest)
        slices = {"num_kv_pairs": torch.full((rows,), pairs), "num_updates": torch.full((rows,), updates)}
        return self._batch(inputs, targets, **slices)

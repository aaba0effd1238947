"""Stacked MQAR: zoology's MQAR with each key and its value in one position (HazyResearch/zoology,
`zoology/data/stacked_mqar.py`, January 2026), so that a single sequence-mixing layer can answer without a short
convolution to shift the key next to its value. Restated in tokens and vectorised here; docs/tasks.md lists the
departures."""

from __future__ import annotations

import torch

from loglinear.synthetics.arguments import check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.sampling import sample_distinct
from loglinear.synthetics.task import Task


class StackedMQAR(Task):
    """Multi-query associative recall whose context positions each hold a whole (key, value) pair.

    With K = num_keys keys and K values (zoology's vocab_size is 2K), N = num_kv_pairs, P = num_passes:

    - N distinct keys and N distinct values, paired at random (zoology's selected keys, selected values and
      mapping).
    - context, positions 0 .. P N - 1: P passes over the N pairs (JRT's repeated context), each pass in a random
      order of its own; a pair (key i, value j) is one token, 2K + i K + j.
    - queries, positions P N .. (P + 1) N - 1: every key once, in a random order, as token i; the target there is its
      value, token K + j (the N scored positions).

    `seq_len` = (P + 1) N follows from the arguments. Tokens: keys 0 .. K-1 (as queries), values K .. 2K-1 (as
    targets), pairs 2K .. 2K + K^2 - 1: `vocab_size` of the model is 2K + K^2; `num_classes` is K. The model reads a
    pair token as the sum of its key's and its value's embeddings (`input_embedding` "stacked"), as zoology feeds
    both embeddings to one position.

    Example, K = 4 (keys 0..3, values 4..7, pair (i, j) = 8 + 4i + j), N = 2, P = 1, pairs (1, 2) and (3, 0)::

        inputs   20 14 | 3 1
        targets   -  - | 4 6
    """

    name = "stacked_mqar"
    input_embedding = "stacked"

    def __init__(self, num_keys: int = 32, num_kv_pairs: int = 8, num_passes: int = 1) -> None:
        self.num_keys = check_int("num_keys", num_keys, minimum=2)
        self.num_kv_pairs = check_int("num_kv_pairs", num_kv_pairs, minimum=1, maximum=num_keys)
        self.num_passes = check_int("num_passes", num_passes, minimum=1)
        self.seq_len = (num_passes + 1) * num_kv_pairs
        self.vocab_size = 2 * num_keys + num_keys**2
        self.num_classes = num_keys

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, pairs, keys = batch_size, self.num_kv_pairs, self.num_keys
        chosen_keys, chosen_values = sample_distinct(rows, pairs, (keys, keys), generator)
        pair_tokens = 2 * keys + chosen_keys * keys + chosen_values
        passes = torch.rand(rows, self.num_passes, pairs, generator=generator).argsort(dim=2)
        context = pair_tokens.gather(1, passes.view(rows, -1))
        queries = torch.rand(rows, pairs, generator=generator).argsort(dim=1)
        inputs = torch.cat([context, chosen_keys.gather(1, queries)], dim=1)
        targets = torch.full((rows, self.seq_len), IGNORE_INDEX, dtype=torch.int64)
        targets[:, -pairs:] = keys + chosen_values.gather(1, queries)
        return self._batch(inputs, targets, num_kv_pairs=torch.full((rows,), pairs))

"""Multi-query associative recall (MQAR), exactly as zoology defines it.

Sources: Arora et al. 2023, "Zoology: Measuring and Improving Recall in Efficient Language
Models" (the task and its generator); Arora et al. 2024, "Simple linear attention language models
balance the recall-throughput tradeoff" (Based: the length mix); Guo et al. 2025, "Log-Linear
Attention" (256-token sequences with 4 to 64 pairs). Our generator is written from the
definition below, not from zoology's code: it is vectorised over the batch and uses only a local
generator (zoology's reseeds numpy's global RNG and tiles a vocab/2-wide array per example).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from loglinear.synthetics.arguments import check_bool, check_float, check_int, check_int_or_ints
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.interleaved import interleaved_positions
from loglinear.synthetics.sampling import sample_distinct, weighted_order_without_replacement
from loglinear.synthetics.task import Task

LAYOUTS = ("zoology", "interleaved")


class MQAR(Task):
    """Multi-query associative recall.

    Each example, with V = vocab_size, T = seq_len and N = num_kv_pairs:

    - keys: N distinct tokens from [1, V/2) (0 is never a key); values: N distinct tokens from
      [V/2, V); key j is paired with value j.
    - context, positions 0 .. 2N-1: k_1 v_1 k_2 v_2 ... k_N v_N.
    - query region, positions 2N .. T-1, holding `space = (T - 2N) // 2` even slots at 2N + 2s,
      s = 0 .. space-1. The N keys take N distinct slots ("gaps") drawn one after another without
      replacement with P(s) proportional to (s + 1)^(power_a - 1) (a power law: early slots are
      much likelier; power_a = 0.01 as in zoology). The j-th slot drawn goes to key j. Mean gap
      at T = 256 for N = 4 / 8 / 16 / 32 / 64: 24.2 / 25.9 / 28.2 / 30.6 / 31.5 (zoology's
      measured 24.0 / 25.7 / 28.1 / 30.5 / 31.5 agree within their sampling error).
    - targets: at the position where key j reappears, v_j (the model answers on seeing the key
      again); every other position is IGNORE_INDEX (-100). N scored positions per example.
    - every other query-region position holds a uniform token from [0, V) (random_non_queries;
      it may repeat a key as an unscored distractor) or 0. The context is never overwritten.

    `num_kv_pairs` may be a list: each example draws its N uniformly from it (the slice
    `num_kv_pairs` records which). Needs 4N <= T (so that N <= space) and N <= V/2 - 1.

    `layout="interleaved"` keeps these vocabulary rules but spreads pairs and queries along the whole
    sequence: pair j at s_j, s_j + 1 and its query at s_j + d_j, d_j log-uniform over 2 .. T-1
    (synthetics/interleaved.py), every other position a filler as above except that it is never one of
    the example's keys (a filler copy of a key would look like a second pair), and `power_a` is not used.
    Seen from a query, zoology's keys all sit in one Fenwick level; these sit in levels 2 .. log2(T).
    `vocab_size` is V; `num_classes` is the number of values, V - V/2.

    Worked example, V = 16 (keys 1..7, values 8..15), T = 16, N = 2, space = 6 slots at
    positions 4, 6, ..., 14; keys (3, 5), values (12, 9); gaps drawn (2, 0): key 3 reappears at
    position 4 + 2*2 = 8, key 5 at position 4; f marks a random filler::

        position  0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15
        inputs    3 12  5  9  5  f  f  f  3  f  f  f  f  f  f  f
        targets   -  -  -  -  9  -  -  -  12 -  -  -  -  -  -  -
    """

    name = "mqar"

    def __init__(
        self,
        vocab_size: int = 8192,
        seq_len: int = 256,
        num_kv_pairs: int | Sequence[int] = 8,
        power_a: float = 0.01,
        random_non_queries: bool = True,
        layout: str = "zoology",
    ) -> None:
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=4)
        self.seq_len = check_int("seq_len", seq_len, minimum=4)
        options = check_int_or_ints("num_kv_pairs", num_kv_pairs, minimum=1)
        self.num_kv_pairs = num_kv_pairs if isinstance(num_kv_pairs, int) else list(options)
        self.power_a = check_float("power_a", power_a)
        self.random_non_queries = check_bool("random_non_queries", random_non_queries)
        if layout not in LAYOUTS:
            raise ValueError(f"unknown mqar layout {layout!r}; valid: {list(LAYOUTS)}")
        self.layout = layout
        most = max(options)
        if 4 * most > seq_len:
            raise ValueError(
                f"mqar needs 4 * num_kv_pairs <= seq_len, got 4 * {most} = {4 * most} > seq_len = {seq_len}"
            )
        half = vocab_size // 2
        if most > half - 1:
            raise ValueError(
                f"vocab_size = {vocab_size} has only {half - 1} keys (tokens 1 .. {half - 1}) for "
                f"num_kv_pairs = {most} distinct keys: needs vocab_size >= {2 * most + 2}"
            )
        self.num_classes = vocab_size - half
        self._max_pairs, self._min_pairs = most, min(options)
        self._token_offsets = torch.tensor([1, half]).view(2, 1, 1)
        self._pair_options = torch.tensor(options)
        widest = (seq_len - 2 * min(options)) // 2
        self._inverse_weights = torch.stack([_slot_inverse_weights(seq_len, n, widest, power_a) for n in options])

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, length, pairs_max, vocab = batch_size, self.seq_len, self._max_pairs, self.vocab_size
        fixed = len(self._pair_options) == 1
        if fixed:
            pairs = self._pair_options.expand(rows)
            inverse_weights = self._inverse_weights.expand(rows, -1)
        else:
            choice = torch.randint(0, len(self._pair_options), (rows,), generator=generator)
            pairs, inverse_weights = self._pair_options[choice], self._inverse_weights[choice]
        half = vocab // 2
        # Keys and values in one draw: key index i is token i + 1, value index i is token i + half.
        drawn = sample_distinct(rows, pairs_max, (half - 1, vocab - half), generator)
        keys, values = drawn.add_(self._token_offsets).unbind(0)
        if self.layout == "interleaved":
            return self._interleaved(pairs, keys, values, generator)
        gaps = weighted_order_without_replacement(inverse_weights, pairs_max, generator)

        # Flat (B*T + 1) buffers: the spare last element absorbs the writes of unused pairs (examples
        # with fewer than the most pairs), so one scatter serves every example whatever its N.
        flat_inputs = torch.empty(rows * length + 1, dtype=torch.int64)
        inputs = flat_inputs[:-1].view(rows, length)
        query_region = inputs[:, 2 * self._min_pairs :]  # context never needs fillers
        if self.random_non_queries:
            query_region.random_(0, vocab, generator=generator)
        else:
            query_region.zero_()
        context = inputs[:, : 2 * pairs_max].view(rows, pairs_max, 2)
        region_start = 2 * pairs + torch.arange(0, rows * length, length)  # flat index of each query region
        query_index = gaps.mul_(2).add_(region_start.unsqueeze(1))
        if fixed:
            context[:, :, 0], context[:, :, 1] = keys, values
        else:
            used = torch.arange(pairs_max) < pairs.unsqueeze(1)
            context[:, :, 0] = torch.where(used, keys, context[:, :, 0])
            context[:, :, 1] = torch.where(used, values, context[:, :, 1])
            query_index.masked_fill_(~used, rows * length)
        query_index = query_index.reshape(-1)
        flat_inputs.scatter_(0, query_index, keys.reshape(-1))
        flat_targets = torch.full((rows * length + 1,), IGNORE_INDEX, dtype=torch.int64)
        flat_targets.scatter_(0, query_index, values.reshape(-1))
        return self._batch(inputs, flat_targets[:-1].view(rows, length), num_kv_pairs=pairs.contiguous())


    def _interleaved(self, pairs: Tensor, keys: Tensor, values: Tensor, generator: torch.Generator) -> Batch:
        rows, length = len(pairs), self.seq_len
        key_at, query_at = interleaved_positions(pairs, self._max_pairs, length, generator)
        if self.random_non_queries:
            inputs = _fillers_without_keys(rows, length, self.vocab_size, keys, key_at >= 0, generator)
        else:
            inputs = torch.zeros(rows, length, dtype=torch.int64)
        targets = torch.full((rows, length), IGNORE_INDEX, dtype=torch.int64)
        used = key_at >= 0
        row = torch.arange(rows)[:, None].expand_as(key_at)[used]
        keys, values, key_at, query_at = keys[used], values[used], key_at[used], query_at[used]
        inputs[row, key_at], inputs[row, key_at + 1], inputs[row, query_at] = keys, values, keys
        targets[row, query_at] = values
        return self._batch(inputs, targets, num_kv_pairs=pairs.contiguous())


def _fillers_without_keys(rows: int, length: int, vocab_size: int, keys: Tensor, used: Tensor,
                          generator: torch.Generator) -> Tensor:
    """`(rows, length)` tokens uniform over [0, vocab_size) minus each row's keys (`keys[used]`), by redrawing the
    tokens that hit a key. With pairs along the whole sequence a filler copy of a key, followed by any token, would
    look like a second pair for that key, and no model could tell which one its query means."""
    inputs = torch.randint(0, vocab_size, (rows, length), generator=generator)
    while True:
        hits = ((inputs[:, :, None] == keys[:, None, :]) & used[:, None, :]).any(dim=2)
        if not hits.any():
            return inputs
        inputs[hits] = torch.randint(0, vocab_size, (int(hits.sum()),), generator=generator)


def _slot_inverse_weights(seq_len: int, num_pairs: int, width: int, power_a: float) -> torch.Tensor:
    """`(width,)`: 1 / P(slot s) up to normalisation, (s + 1)^(1 - power_a), for the
    (seq_len - 2 * num_pairs) // 2 slots of the query region; inf (never drawn) beyond them."""
    space = (seq_len - 2 * num_pairs) // 2
    inverse = torch.full((width,), float("inf"))
    inverse[:space] = torch.arange(1, space + 1, dtype=torch.float64).pow(1 - power_a).float()
    return inverse

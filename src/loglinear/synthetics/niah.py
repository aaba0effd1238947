"""Needle in a haystack (NIAH) as RULER defines its needle tasks (Hsieh et al. 2024, "RULER: What's the Real Context
Size of Your Long-Context Language Models?", NVIDIA/RULER `scripts/data/synthetic/niah.py`), restated in tokens for a
model trained from scratch and tested by context length and needle depth. Written from RULER's definition, vectorised
over the batch; docs/tasks.md lists every departure."""

from __future__ import annotations

import torch
from torch import Tensor

from loglinear.synthetics.arguments import check_answers, check_float, check_int
from loglinear.synthetics.batch import IGNORE_INDEX, Batch
from loglinear.synthetics.sampling import sample_distinct
from loglinear.synthetics.task import Task

HAYSTACKS = ("noise", "needles")


class NeedleInAHaystack(Task):
    """Key-value needles hidden in a haystack, one or more of their keys queried after it.

    With K = key_vocab, W = value_vocab, key_len and value_len tokens per key and per value: keys are tuples of
    tokens from [0, K), values tuples from [K, K + W), noise tokens [K + W, vocab_size). A needle is a key followed by
    a value (n = key_len + value_len tokens). Per example, `num_needle_keys` distinct keys each get
    `num_needle_values` distinct values, one needle per (key, value); the first `num_needle_queries` keys (in the
    random order they were drawn) are queried, the others are distractor needles (RULER's multi-key).

    - The context (the first C = T - Q positions, Q the query region's length) holds the needles in a haystack:
      `noise`, uniform noise tokens, the needles at uniformly random positions that do not overlap; or `needles`,
      RULER's haystack of distractor needles: C // n slots of n tokens (after C mod n noise tokens), each slot a needle
      whose key is none of the example's needle keys and whose value is uniform, but for the slots of the needles.
    - `depth` None: every needle anywhere (uniform, as above). `depth` d in [0, 1]: the needles of the queried keys
      (the answer needles, in random order) stand together in a block that starts at round(d * (C - block)) tokens
      (`needles`: slots) from the start, d = 0 the start of the context and d = 1 its end; the other needles stay
      uniform outside the block.
    - The query region: per queried key, in the order drawn, the key's tokens then its values' tokens, the values in
      the order their needles stand in the context (teacher forcing: each value token is an input after it is
      predicted). The target at the key's last token is the first value token, at each value token but the key's
      last the next value token: `num_needle_queries * num_needle_values * value_len` scored positions.

    Example, key_vocab 4 (keys 0..3), value_vocab 4 (values 4..7), noise 8..9, T = 12, one needle `2 6` at depth 0.5
    (block of 2 in a context of 10: position 4), query `2`::

        inputs   8 9 9 8 2 6 8 9 8 9 | 2 6
        targets  - - - - - - - - - - | 6 -
    """

    name = "niah"

    def __init__(self, seq_len: int = 256, key_vocab: int = 16, value_vocab: int = 16, noise_vocab: int = 32,
                 key_len: int = 1, value_len: int = 1, num_needle_keys: int = 1, num_needle_values: int = 1,
                 num_needle_queries: int = 1, haystack: str = "noise", depth: float | None = None) -> None:
        self.seq_len = check_int("seq_len", seq_len, minimum=4)
        self.key_vocab = check_int("key_vocab", key_vocab, minimum=1)
        self.value_vocab = check_int("value_vocab", value_vocab, minimum=1)
        self.noise_vocab = check_int("noise_vocab", noise_vocab, minimum=1)
        self.key_len = check_int("key_len", key_len, minimum=1)
        self.value_len = check_int("value_len", value_len, minimum=1)
        self.num_needle_keys = check_int("num_needle_keys", num_needle_keys, minimum=1)
        self.num_needle_values = check_int("num_needle_values", num_needle_values, minimum=1)
        self.num_needle_queries = check_int("num_needle_queries", num_needle_queries, minimum=1,
                                            maximum=num_needle_keys)
        if haystack not in HAYSTACKS:
            raise ValueError(f"unknown niah haystack {haystack!r}; valid: {list(HAYSTACKS)}")
        self.haystack = haystack
        self.depth = None if depth is None else check_float("depth", depth, minimum=0.0, maximum=1.0)
        self.vocab_size = key_vocab + value_vocab + noise_vocab
        self.num_classes = check_answers(value_vocab, "value_vocab", "needs value_vocab >= 2")
        self._keys, self._values = key_vocab**key_len, value_vocab**value_len
        for name, count in (("key_vocab**key_len", self._keys), ("value_vocab**value_len", self._values)):
            if count >= 2**62:  # keys and values are drawn as int64 indices
                raise ValueError(f"{name} = {count} is too many to draw from: keep it below 2**62")
        distractor_keys = int(haystack == "needles")
        if self._keys < num_needle_keys + distractor_keys:
            raise ValueError(f"key_vocab**key_len = {self._keys} keys cannot give {num_needle_keys} distinct needle "
                             "keys" + (" and a distractor key other than them" if distractor_keys else ""))
        if self._values < num_needle_values:
            raise ValueError(f"value_vocab**value_len = {self._values} values cannot give each key "
                             f"{num_needle_values} distinct values")
        self._needle = key_len + value_len
        self._needles = num_needle_keys * num_needle_values
        self._answers = num_needle_queries * num_needle_values
        self._query = key_len + num_needle_values * value_len
        self._context = seq_len - num_needle_queries * self._query
        # Placement units: `needles` places needles in slots of n tokens (size 1), `noise` anywhere (size n tokens).
        self._room, self._size = ((self._context // self._needle, 1) if haystack == "needles"
                                  else (self._context, self._needle))
        if self._room - self._needles * (self._size - 1) < self._needles:
            raise ValueError(f"seq_len = {seq_len} leaves a context of {self._context} tokens, too short for "
                             f"{self._needles} needles of {self._needle} tokens after a query region of "
                             f"{seq_len - self._context}")
        block = self._answers * self._size
        self._first = None if depth is None else round(depth * (self._room - block))
        if self._first is not None:
            fits = self._first // self._size + (self._room - block - self._first) // self._size
            if fits < self._needles - self._answers:
                raise ValueError(f"depth = {depth} puts the answer needles where the context leaves room for {fits} "
                                 f"of the {self._needles - self._answers} other needles: use a longer seq_len")

    def _sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows, keys_n, values_n = batch_size, self.num_needle_keys, self.num_needle_values
        keys = sample_distinct(rows, keys_n, (self._keys,), generator)[0]  # (B, k) in random order
        values = sample_distinct(rows * keys_n, values_n, (self._values,), generator)[0].view(rows, keys_n, values_n)
        key_tokens = digits(keys, self.key_vocab, self.key_len)  # (B, k, key_len)
        value_tokens = digits(values, self.value_vocab, self.value_len) + self.key_vocab  # (B, k, v, value_len)
        needles = torch.cat([key_tokens[:, :, None].expand(-1, -1, values_n, -1), value_tokens], dim=3)
        needles = needles.view(rows, self._needles, self._needle)  # needle i * v + j: key i, value j
        starts = self._place(rows, generator)  # (B, needles) in placement units
        if self.haystack == "needles":
            starts = self._context % self._needle + self._needle * starts  # slots to tokens

        noise_start = self.key_vocab + self.value_vocab
        inputs = torch.randint(noise_start, self.vocab_size, (rows, self.seq_len), generator=generator)
        if self.haystack == "needles":
            self._fill_with_distractors(inputs, keys, generator)
        at = starts[:, :, None] + torch.arange(self._needle)
        inputs.scatter_(1, at.view(rows, -1), needles.view(rows, -1))

        # Query region: each queried key, then its values in the order their needles stand.
        queried = self.num_needle_queries
        order = starts[:, : self._answers].view(rows, queried, values_n).argsort(dim=2)
        answers = value_tokens[:, :queried].gather(2, order[..., None].expand(-1, -1, -1, self.value_len))
        answers = answers.reshape(rows, queried, values_n * self.value_len)
        inputs[:, self._context:] = torch.cat([key_tokens[:, :queried], answers], dim=2).view(rows, -1)
        targets = torch.full((rows, queried, self._query), IGNORE_INDEX, dtype=torch.int64)
        targets[:, :, self.key_len - 1 : self.key_len - 1 + answers.shape[2]] = answers
        full = torch.full((rows, self.seq_len), IGNORE_INDEX, dtype=torch.int64)
        full[:, self._context:] = targets.view(rows, -1)
        return self._batch(inputs, full)

    def _place(self, rows: int, generator: torch.Generator) -> Tensor:
        """(B, needles): non-overlapping starts of the needles (the answer needles first), uniform over the
        placements; with `depth`, the answers' block at its place and the other needles uniform outside it."""
        room, size = self._room, self._size
        if self._first is None:
            return spread(rows, self._needles, room, size, generator)
        first, block = self._first, self._answers * size
        answers = first + size * torch.rand(rows, self._answers, generator=generator).argsort(dim=1)
        others = self._needles - self._answers
        if others == 0:
            return answers
        outside = spread(rows, others, room - block, size, generator)
        straddles = ((outside < first) & (outside + size > first)).any(dim=1)
        while straddles.any():  # a needle across the block's place: drawn again (uniform over the allowed ones)
            outside[straddles] = spread(int(straddles.sum()), others, room - block, size, generator)
            straddles = ((outside < first) & (outside + size > first)).any(dim=1)
        return torch.cat([answers, outside + block * (outside >= first)], dim=1)

    def _fill_with_distractors(self, inputs: Tensor, keys: Tensor, generator: torch.Generator) -> None:
        """RULER's `needle` haystack: every slot of the context a distractor needle, keys none of the example's."""
        rows, slots = inputs.shape[0], self._context // self._needle
        drawn = torch.randint(0, self._keys - keys.shape[1], (rows, slots), generator=generator)
        for excluded in keys.sort(dim=1).values.unbind(1):  # skip the needle keys, the smallest first
            drawn += drawn >= excluded[:, None]
        values = torch.randint(0, self._values, (rows, slots), generator=generator)
        filler = torch.cat([digits(drawn, self.key_vocab, self.key_len),
                            digits(values, self.value_vocab, self.value_len) + self.key_vocab], dim=2)
        inputs[:, self._context % self._needle : self._context] = filler.view(rows, -1)


def spread(rows: int, items: int, room: int, size: int, generator: torch.Generator) -> Tensor:
    """(rows, items) starts of `items` non-overlapping runs of `size` units in [0, room), uniform over the placements
    and over which item goes where (stars and bars: distinct draws from room - items * (size - 1), the r-th smallest
    moved right by r * (size - 1))."""
    draws = sample_distinct(rows, items, (room - items * (size - 1),), generator)[0]
    return draws + (size - 1) * draws.argsort(dim=1).argsort(dim=1)


def digits(index: Tensor, base: int, length: int) -> Tensor:
    """`index` (...) written as `length` base-`base` digits, the most significant first: (..., length)."""
    powers = base ** torch.arange(length - 1, -1, -1)
    return index[..., None] // powers % base

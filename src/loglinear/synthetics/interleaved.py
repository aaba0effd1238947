"""Where the pairs and queries of an interleaved MQAR example go: every key-value pair at s, s + 1 and its
query at t = s + d, with the distance d drawn log-uniformly, so that at recall time the keys of one
sequence sit at every scale of distance (and so in every Fenwick level), not all in one block."""

from __future__ import annotations

import torch
from torch import Tensor

MAX_REDRAWS = 1000
"""Rows whose pairs left no free (key, value, query) triple are redrawn whole; this many redraws of one batch
without success is an error rather than a loop that never ends (it has never happened for 4N <= T)."""


def interleaved_positions(pairs: Tensor, most: int, seq_len: int,
                          generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """`(key_at, query_at)`, both `(B, most)` int64: key j of row b at key_at[b, j] (its value right after it)
    and its query at query_at[b, j]; -1 beyond the row's `pairs[b]` pairs (`most` >= every `pairs[b]`).

    Pairs are placed one after another. Pair j draws its distance d = t - s from 2 .. T-1 with
    P(d) proportional to 1/d (log-uniform; d = 1 would put the query on the value) among the distances that
    still have a free triple s, s + 1, t = s + d, then its query t uniformly among those triples. A row that
    runs out of free triples is redrawn from scratch (rejection: accepted rows follow the same law).
    """
    rows = len(pairs)
    key_at = torch.full((rows, most), -1, dtype=torch.int64)
    query_at = torch.full((rows, most), -1, dtype=torch.int64)
    pending = torch.arange(rows)
    for _ in range(MAX_REDRAWS):
        keys, queries, failed = _place(pairs[pending], most, seq_len, generator)
        done = pending[~failed]
        key_at[done], query_at[done] = keys[~failed], queries[~failed]
        pending = pending[failed]
        if len(pending) == 0:
            return key_at, query_at
    raise RuntimeError(f"could not place {most} interleaved pairs in {seq_len} tokens after {MAX_REDRAWS} redraws")


def _place(pairs: Tensor, most: int, seq_len: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """One attempt for every row: key and query positions `(B, most)` and which rows ran out of room."""
    rows = len(pairs)
    distances = torch.arange(seq_len - 1, 1, -1)  # (D,): T-1 .. 2, the order of _free_triples' windows
    weights = 1.0 / distances.double()
    free = torch.ones(rows, seq_len, dtype=torch.bool)
    key_at = torch.full((rows, most), -1, dtype=torch.int64)
    query_at = torch.full((rows, most), -1, dtype=torch.int64)
    failed = torch.zeros(rows, dtype=torch.bool)
    row = torch.arange(rows)
    padding = torch.zeros(rows, seq_len, dtype=torch.bool)
    positions = torch.arange(seq_len)
    for j in range(most):
        pair_free = torch.cat([padding, free[:, :-1] & free[:, 1:], padding[:, :1]], dim=1)  # (B, 2T): s at T + s
        # triple (s, s + 1, t = s + d) free <=> free[t] and pair_free at T + t - d = w + t, window w = T - d (1 .. D)
        d_weights = (_free_triples(pair_free, free) > 0) * weights  # (B, D)
        possible = d_weights.sum(dim=1) > 0
        active = (j < pairs) & ~failed
        failed |= active & ~possible
        active &= possible
        d_weights[~possible] = 1.0  # placeholder draws for rows that place nothing, discarded below
        d_index = torch.multinomial(d_weights, 1, generator=generator)[:, 0]
        t_weights = (pair_free.gather(1, d_index[:, None] + 1 + positions) & free).double()  # (B, T)
        t_weights[t_weights.sum(dim=1) == 0] = 1.0
        t = torch.multinomial(t_weights, 1, generator=generator)[:, 0]
        key = t - distances[d_index]
        placed = row[active]
        key_at[placed, j], query_at[placed, j] = key[active], t[active]
        free[placed, key[active]] = free[placed, key[active] + 1] = free[placed, t[active]] = False
    return key_at, query_at, failed


def _free_triples(pair_free: Tensor, free: Tensor) -> Tensor:
    """(B, D): for each distance d = T-1 .. 2, how many queries t have s = t - d, s + 1 and t all free; one grouped
    cross-correlation of each row's free query positions with its free pair starts (counts up to T: exact in
    float32), rather than a (B, D, T) mask."""
    rows, seq_len = free.shape
    counts = torch.nn.functional.conv1d(pair_free.float()[None], free.float()[:, None], groups=rows)[0]  # (B, T+1)
    return counts[:, 1 : seq_len - 1]

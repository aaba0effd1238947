"""Where the pairs and queries of an interleaved MQAR example go: every key-value pair at s, s + 1 and its
query at t = s + d, with the distance d drawn log-uniformly, so that at recall time the keys of one
sequence sit at every scale of distance (and so in every Fenwick level), not all in one block."""

from __future__ import annotations

import torch
from torch import Tensor

INCREMENTAL_FROM = 1024
"""From this length on the free triples are updated as each pair takes its positions (`_lost_triples`, O(T) a pair)
rather than counted again (`_free_triples`, O(T^2) a pair, but one fast convolution: cheaper on short sequences).
Both count the same triples, so the draws are the same either way."""
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
    distances = torch.arange(seq_len - 1, 1, -1)  # (D,): T-1 .. 2
    weights = 1.0 / distances.double()
    free = torch.ones(rows, seq_len, dtype=torch.bool)
    triples = (seq_len - distances).repeat(rows, 1)  # (B, D): free triples (s, s + 1, t = s + d) at each distance
    key_at = torch.full((rows, most), -1, dtype=torch.int64)
    query_at = torch.full((rows, most), -1, dtype=torch.int64)
    failed = torch.zeros(rows, dtype=torch.bool)
    row = torch.arange(rows)
    padding = torch.zeros(rows, seq_len, dtype=torch.bool)
    positions = torch.arange(seq_len)
    for j in range(most):
        pair_free = torch.cat([padding, free[:, :-1] & free[:, 1:], padding[:, :1]], dim=1)  # (B, 2T): s at T + s
        if seq_len < INCREMENTAL_FROM:
            triples = _free_triples(pair_free, free)
        d_weights = (triples > 0) * weights  # (B, D)
        possible = d_weights.sum(dim=1) > 0
        active = (j < pairs) & ~failed
        failed |= active & ~possible
        active &= possible
        d_weights[~possible] = 1.0  # placeholder draws for rows that place nothing, discarded below
        d_index = torch.multinomial(d_weights, 1, generator=generator)[:, 0]
        # triple (s, s + 1, t = s + d) free <=> free[t] and pair_free at T + t - d = w + t, window w = T - d
        t_weights = (pair_free.gather(1, d_index[:, None] + 1 + positions) & free).double()  # (B, T)
        t_weights[t_weights.sum(dim=1) == 0] = 1.0
        t = torch.multinomial(t_weights, 1, generator=generator)[:, 0]
        key = t - distances[d_index]
        placed = row[active]
        key_at[placed, j], query_at[placed, j] = key[active], t[active]
        taken = torch.stack([key[active], key[active] + 1, t[active]], dim=1)  # (A, 3)
        if seq_len >= INCREMENTAL_FROM:
            triples[placed] -= _lost_triples(free[placed], taken, distances)
        free[placed, key[active]] = free[placed, key[active] + 1] = free[placed, t[active]] = False
    return key_at, query_at, failed


def _free_triples(pair_free: Tensor, free: Tensor) -> Tensor:
    """(B, D): for each distance d = T-1 .. 2, how many queries t have s = t - d, s + 1 and t all free; one grouped
    cross-correlation of each row's free query positions with its free pair starts (counts up to T: exact in
    float32). O(T^2) a pair, cheaper than `_lost_triples`'s update below INCREMENTAL_FROM tokens."""
    rows, seq_len = free.shape
    counts = torch.nn.functional.conv1d(pair_free.float()[None], free.float()[:, None], groups=rows)[0]  # (B, T+1)
    return counts[:, 1 : seq_len - 1].long()


def _lost_triples(free: Tensor, taken: Tensor, distances: Tensor) -> Tensor:
    """(A, D): for each row and distance, the free triples (s, s + 1, t = s + d) that hold a position of `taken`
    (A, 3), which are no longer free once those are taken: O(T) work a pair, where counting every triple again
    would be O(T^2). A triple holds p as its query (t = p), its key (t = p + d) or its value (t = p - 1 + d)."""
    rows, seq_len = free.shape
    d = distances[None, :, None]  # (1, D, 1)
    p = taken[:, None, :]  # (A, 1, 3)
    queries = torch.cat([p.expand(-1, len(distances), -1), p + d, p - 1 + d], dim=2).sort(dim=2).values  # (A, D, 9)
    distinct = torch.ones_like(queries, dtype=torch.bool)
    distinct[..., 1:] = queries[..., 1:] != queries[..., :-1]
    inside = (queries >= d) & (queries < seq_len)
    at = queries.clamp(0, seq_len - 1)
    was_free = torch.ones_like(queries, dtype=torch.bool)
    for offset in (0, d, d - 1):  # the query, the key, the value
        was_free &= free.gather(1, (at - offset).clamp(0, seq_len - 1).flatten(1)).view_as(queries)
    return (distinct & inside & was_free).sum(dim=2)

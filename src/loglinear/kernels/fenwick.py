"""Fenwick-tree bookkeeping of log-linear attention: which level a key sits in, seen from a query.

Positions are absolute (0-indexed). Seen from query position t, key s <= t sits in level
``fenwick_level(t, s) = bit_length(t XOR s)``: level 0 holds the query itself, level l >= 1 holds a
contiguous block of 2^(l-1) earlier positions. Everything here is computed from bit operations on
the fly: no cached T x T tables and no length cap.
"""

from __future__ import annotations

import torch
from torch import Tensor


def num_levels(n: int) -> int:
    """Levels needed for n positions: ``(n - 1).bit_length() + 1``, and 1 for n <= 1."""
    return 1 if n <= 1 else (n - 1).bit_length() + 1


def occupied_levels(n: int) -> int:
    """Levels holding keys after n >= 1 tokens (positions 0..n-1): level 0 holds the last token and level
    l >= 1 a block of 2^(l-1) keys exactly when bit l-1 of n-1 is set, so 1 + popcount(n - 1), at most
    num_levels(n) (reached when n is a power of two)."""
    if n < 1:
        raise ValueError(f"occupied_levels needs n >= 1 tokens, got {n}")
    return 1 + (n - 1).bit_count()


def fenwick_level(t: int, s: int) -> int:
    """Level of key position s seen from query position t (0 <= s <= t): 0 if s == t, else bit_length(t ^ s)."""
    if not 0 <= s <= t:
        raise ValueError(f"fenwick_level needs 0 <= s <= t, got t={t}, s={s}")
    return (t ^ s).bit_length()


def bit_length(x: Tensor) -> Tensor:
    """Elementwise ``int.bit_length`` of a non-negative integer tensor (exact below 2^53)."""
    if torch.compiler.is_compiling():
        return _bit_length_by_halving(x)
    # frexp writes x = m * 2^e with m in [0.5, 1), so e is the bit length; frexp(0) gives e = 0.
    return torch.frexp(x.to(torch.float64)).exponent.to(torch.int64)


def _bit_length_by_halving(x: Tensor) -> Tensor:
    """`bit_length` in integer operations only (exact below 2^63), the form traced under torch.compile: inductor's
    vectorised C++ code for frexp's int32 exponent does not compile (torch 2.13, AVX-512)."""
    n = torch.zeros_like(x, dtype=torch.int64)
    for k in (32, 16, 8, 4, 2, 1):
        high = x >= (1 << k)
        n, x = n + high * k, torch.where(high, x >> k, x)
    return n + (x > 0)


def trailing_zeros(p: Tensor) -> Tensor:
    """Number of trailing zero bits of each positive entry of p; -1 where p == 0."""
    return bit_length(p & -p) - 1


def level_matrix(t_pos: Tensor, s_pos: Tensor) -> Tensor:
    """Levels ``bit_length(t ^ s)`` for every pair: t_pos (..., Tq), s_pos (..., Ts) -> (..., Tq, Ts).

    Entries with s > t are not meaningful (the causal mask removes them); they are still valid
    level numbers, so gathers with them stay in range whenever the causal part does.
    """
    return bit_length(t_pos[..., :, None] ^ s_pos[..., None, :])


def fenwick_merge(S: Tensor, p: Tensor) -> Tensor:
    """The merge of the Fenwick recurrence when position p arrives, vectorised over the batch.

    S: level states (B, H, L, ...); p: (B,) int64 positions. For p > 0 with z trailing zeros, levels 0..z are
    summed into level z+1 and cleared; p == 0 leaves S unchanged. Never syncs with the host. One position shared
    by the batch, on levels held as a list: `fenwick_merge_levels`.
    """
    z = trailing_zeros(p)  # (B,), -1 where p == 0
    level = torch.arange(S.shape[2], device=S.device)  # (L,)
    shape = (S.shape[0], 1, S.shape[2]) + (1,) * (S.dim() - 3)
    into = (level[None, :] == (z + 1)[:, None]).reshape(shape)  # (B, 1, L, 1...) the receiving level
    cleared = (level[None, :] <= z[:, None]).reshape(shape)  # (B, 1, L, 1...) levels emptied by the merge
    merged = torch.where(cleared | into, S, torch.zeros_like(S)).sum(dim=2, keepdim=True)
    return torch.where(into, merged, torch.where(cleared, torch.zeros_like(S), S))


def fenwick_merge_levels(levels: list[Tensor | None], p: int) -> list[Tensor | None]:
    """`fenwick_merge` at one position p shared by the batch, of level states held as a list (None: an empty
    level): for p > 0 with z trailing zeros, levels 0..z are added into level z+1 in order (the order of
    fenwick_merge's sum) and emptied; the list grows to z + 2 levels if it has fewer."""
    if p == 0:
        return levels
    z = (p & -p).bit_length() - 1
    merged = None
    for s in levels[: z + 2]:
        if s is not None:
            merged = s if merged is None else merged + s
    return [None] * (z + 1) + [merged] + levels[z + 2 :]


def state_bucket_levels(last: Tensor, t_pos: Tensor, n_buckets: int) -> Tensor:
    """Level, seen from query positions t_pos, of each bucket of a state whose last position was `last`.

    A bucket l of a Fenwick state holds keys that stay together forever: seen from any later query
    t it sits in level max(l, bit_length(t ^ last)). last: (B,), t_pos: (B, T) -> (B, T, n_buckets).
    A fresh state (nothing consumed) uses last = 0, which reproduces the recurrence from position 0.
    """
    d = bit_length(t_pos ^ last[:, None])  # (B, T)
    buckets = torch.arange(n_buckets, device=t_pos.device)
    return torch.maximum(buckets[None, None, :], d[:, :, None])

"""Chunkwise log-linear attention in PyTorch: O(T log(T/C)) work, matmul-rich, differentiable.

The sequence is cut into chunks of C = 2^c positions aligned to absolute multiples of C, so every
key s in an earlier chunk J sits, seen from any query in chunk I, at level c + bit_length(I ^ J):
one Fenwick level per chunk pair. Per batch element and head, in the steps of `chunk_log_linear_attn`:

1. `intra_chunk` (dense C x C, like the naive form): A = Q K^T ⊙ M^S (times (I + L)^-1 diag(beta)
   for the delta rule), masked by M^H_ts = lambda_t^(bit_length(t ^ s)), o = (A ⊙ M^H) V.
2. `chunk_effects`: each chunk's effect on a state (the UT/WY form for the delta rule): its
   transition P = W_first...W_last, its contribution D = sum_s v_s c_s^T with
   c_s^T = beta_s k_s^T W_{s+1}..W_last, and the effective queries r_t = W_first..W_t q_t.
3. `inter_chunk_scan`: one pass over the chunks carrying the chunk-level Fenwick state (the
   recurrence of kernels/recurrent.py with chunks as tokens and D as the outer product): at chunk I
   its bucket m holds the keys at level c + m, and o_t += sum_m lambda_t^(c+m) H_m r_t. From
   position 0 with no final state wanted (training) the loop is skipped: each level's buckets come
   from aligned blocks of chunks, as segment sums under a scalar decay (`_scalar_decay_reads`) and
   from the blocks' halves under the delta rule with lam (`_delta_rule_reads`; its one state without
   lam stays in the loop, which costs less there).
4. `initial_state_reads`: an initial state's buckets travel with the chunk transitions; bucket l is
   read at level max(l, bit_length(p_t ^ last)).
5. `final_state`: the last chunk's buckets plus that chunk's own keys split into levels 0..c.

All gate sums are formed in log space and only exp of non-positive numbers is taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from loglinear.kernels.fenwick import bit_length, fenwick_merge_levels, level_matrix, state_bucket_levels
from loglinear.kernels.layout import ChunkLayout
from loglinear.kernels.level_gather import gather_levels
from loglinear.kernels.state import LogLinearState
from loglinear.kernels.variant import Variant


def chunk_log_linear_attn(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None, variant: Variant,
    state: LogLinearState | None, out_levels: int, chunk_size: int, need_state: bool = True,
) -> tuple[Tensor, LogLinearState | None]:
    """Inputs (B, T, H, *) in the compute dtype, lam with `out_levels` levels; returns o (B, T, H, V), final state.

    `variant` says which transition applies; `beta` (B, T, H) is read for the delta rule only.
    q and k may have one head shared by all of v's heads (B, T, 1, K): it is broadcast, never copied.
    need_state False skips the final state (returned as None) and the work only it needs.
    """
    T = q.shape[1]
    C = min(chunk_size, 1 << (T - 1).bit_length())  # no chunk longer than the (rounded-up) sequence

    # 0. chunks aligned to absolute multiples of C: an initial state at position p0 shifts the tokens by p0 mod C.
    #    Sequences whose first chunks differ run as separate groups, so the chunk index is one host integer.
    p0 = torch.zeros(q.shape[0], dtype=torch.int64, device=q.device) if state is None else state.position
    first_chunks = [0] if state is None else (p0 // C).tolist()
    if len(set(first_chunks)) > 1:
        return _run_grouped(first_chunks, q, k, v, g, lam, beta, variant, state, out_levels, chunk_size, need_state)
    layout = ChunkLayout.at_start(q.shape[0], T, C, q.device) if state is None else ChunkLayout.build(p0, T, C)
    x = Chunks.cut(layout, q, k, v, g, lam, beta, variant)
    carry = layout.N > 1 or state is not None or need_state  # anything beyond the dense form within chunks

    o, A, Tinv = intra_chunk(x, out_levels, carry)
    if not carry:  # one chunk and nothing to carry: the dense form is all
        return layout.from_chunks(o.flatten(2, 3)), None
    effects = chunk_effects(x, A, Tinv)
    # from position 0 with no final state wanted, no loop over chunks; but the delta rule's one state (no lam) costs
    # less through the loop than as levels
    if state is None and not need_state and (x.lam is not None or not x.delta):
        if x.delta:
            o = o + _delta_rule_reads(effects.R, effects.D, effects.P, x.lam, layout.c, out_levels)
        else:
            o = o + _scalar_decay_reads(effects.R, effects.D, x.G[..., -1], x.lam, layout.c, out_levels)
        return layout.from_chunks(o.flatten(2, 3)), None
    o, starts, initial_starts = inter_chunk_scan(o, x, effects, first_chunks[0], state)
    base = p0 - layout.shift.long()  # (B,) absolute position of each sequence's first (padding) slot
    if state is not None:
        o = o + initial_state_reads(x, effects, initial_starts, state, base, out_levels)
    final = final_state(x, effects, starts, initial_starts, state, base, p0 + T, out_levels) if need_state else None
    return layout.from_chunks(o.flatten(2, 3)), final


Buckets = list[Tensor | None]
"""The chunk-level Fenwick state as `inter_chunk_scan` carries it: bucket m's (B, H, V, K) state, None while empty."""


@dataclass
class Chunks:
    """The inputs cut into N chunks of C slots, (B, H, N, C, ...): Q and K may have one head shared by all."""

    Q: Tensor  # (B, H|1, N, C, K)
    K: Tensor  # (B, H|1, N, C, K)
    V: Tensor  # (B, H, N, C, V)
    g: Tensor  # (B, H, N, C) log-decays
    G: Tensor  # (B, H, N, C) log-decay from the chunk start, inclusive
    lam: Tensor | None  # (B, H, N, C, L)
    beta: Tensor | None  # (B, H, N, C), read by the delta rule only
    delta: bool  # the variant: the delta rule (else a scalar decay)

    @classmethod
    def cut(cls, layout: ChunkLayout, q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None,
            beta: Tensor | None, variant: Variant) -> Chunks:
        def chunked(x: Tensor | None) -> Tensor | None:
            return None if x is None else layout.to_chunks(x).unflatten(2, (layout.N, layout.C))

        g_c = chunked(g)
        delta = variant is Variant.DELTA_RULE
        return cls(chunked(q), chunked(k), chunked(v), g_c, g_c.cumsum(-1), chunked(lam), chunked(beta), delta)


@dataclass
class ChunkEffects:
    """Each chunk as an update of a state S (B, H, L, V, K): S -> S W + D with W = W_first...W_last."""

    R: Tensor  # (B, H, N, C, K) effective queries r_t = W_first..W_t q_t (what o_t reads of a state at the chunk start)
    Kd: Tensor  # (B, H, N, C, K) c_s = beta_s W_last^T..W_{s+1}^T k_s: key s carried to the chunk end
    D: Tensor  # (B, H, N, V, K) the chunk's keys at its end, sum_s v_s c_s^T
    a: Tensor | None  # (B, H, N) the transition W = a I of a scalar decay (Mamba-2)
    P: Tensor | None  # (B, H, N, K, K) the transition W = P of the delta rule

    def move(self, S: Tensor, n: int | list[int]) -> Tensor:
        """S, the buckets (B, H, L, V, K) or one of them (B, H, V, K), through chunk n's transition (a list: chunk
        n[b] for sequence b)."""
        W = self.a if self.P is None else self.P
        W = W[:, :, n] if isinstance(n, int) else _per_sequence(W, n)
        buckets = (1,) * (S.dim() - 4)  # the bucket axis between (B, H) and (V, K), if S has one
        if self.P is None:
            return W.reshape(W.shape + buckets + (1, 1)) * S
        return S @ W.reshape(W.shape[:2] + buckets + W.shape[2:])


def intra_chunk(x: Chunks, out_levels: int, carry: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """Step 1, dense within each chunk as in the naive form: o = (A ⊙ M^H) V with A = Q K^T ⊙ M^S (times
    T = (I + L)^-1 diag(beta) for the delta rule, L = tril(diag(beta) K K^T ⊙ M^S, -1)) and
    M^H_ts = lambda_t^(bit_length(t ^ s)).

    Returns o (B, H, N, C, V), A (A T for the delta rule when `carry` or lam is given: the later steps
    need it) and (I + L)^-1 (None without beta).
    """
    B, H, N, C = x.V.shape[:4]
    MS = _decay_matrix(x.G)  # (B, H, N, C, C) M^S
    A = (x.Q @ x.K.transpose(-1, -2)) * MS  # (B, H, N, C, C)
    Tinv = None
    if x.delta:
        Tinv = _unit_lower_inverse(x.beta[..., :, None] * (x.K @ x.K.transpose(-1, -2)) * MS)  # (I + L)^-1
        if x.lam is None:
            o = A @ (Tinv @ (x.beta[..., None] * x.V))  # (B, H, N, C, V): no C x C x C product
        if x.lam is not None or carry:
            A = (A @ Tinv) * x.beta[..., None, :]  # (B, H, N, C, C)
    if x.lam is not None:
        slots = torch.arange(C, device=x.V.device)
        ell = level_matrix(slots, slots).clamp(max=out_levels - 1)  # (C, C)
        o = (A * gather_levels(x.lam, ell.expand(B, H, N, C, C))) @ x.V  # (B, H, N, C, V)
    elif not x.delta:
        o = A @ x.V  # (B, H, N, C, V)
    return o, A, Tinv


def chunk_effects(x: Chunks, A: Tensor, Tinv: Tensor | None) -> ChunkEffects:
    """Step 2: every chunk's effective queries, carried keys and transition (the UT/WY form for the delta rule)."""
    eG = x.G.exp()[..., None]  # (B, H, N, C, 1)
    gamma = (x.G[..., -1:] - x.G).exp()[..., None]  # (B, H, N, C, 1) decay from s to the chunk end
    if not x.delta:
        R, Kd = eG * x.Q, gamma * x.K  # (B, H, N, C, K)
        a, P = x.G[..., -1].exp(), None  # (B, H, N)
    else:
        R = eG * x.Q - A @ (eG * x.K)
        # Kd = T^T (gamma K) with T = (I + L)^-1 diag(beta): diag(beta) (I + L)^-T (gamma K)
        Kd = x.beta[..., None] * (Tinv.transpose(-1, -2) @ (gamma * x.K))
        eye = torch.eye(x.K.shape[-1], dtype=x.K.dtype, device=x.K.device)
        a, P = None, x.G[..., -1].exp()[..., None, None] * eye - (eG * x.K).transpose(-1, -2) @ Kd  # (B, H, N, K, K)
    D = x.V.transpose(-1, -2) @ Kd  # (B, H, N, V, K)
    return ChunkEffects(R, Kd, D, a, P)


def inter_chunk_scan(
    o: Tensor, x: Chunks, effects: ChunkEffects, first_chunk: int, state: LogLinearState | None,
) -> tuple[Tensor, list[Buckets], list[Tensor]]:
    """Step 3: one pass over the chunks carrying the chunk-level Fenwick state (the recurrence of
    kernels/recurrent.py with chunks as tokens and D as the outer product; the state grows as levels
    fill). At chunk I its bucket m >= 1 holds the keys at level c + m and is non-empty exactly when bit
    m-1 of I is set: only those (chunk, bucket) pairs are read, o_t += lambda_t^(c+m) H_m r_t, half of
    all on average, one batched matmul per bucket.

    The buckets travel as a list, one (B, H, V, K) tensor each (None: empty): the merge sums and empties single
    buckets and the chunk's keys go into bucket 0 alone, with no torch.cat of the state (they are stacked only for
    the chunk's one batched move). Inductor's vectorised CPU code computes the backward of the concatenating form
    wrong (torch 2.13, docs/operator.md#torchcompile-on-the-cpu).

    Returns o plus the reads, the buckets at each chunk's start, and the initial state's buckets at each
    chunk's start (moved through the chunks before it; empty without a state).
    """
    c = o.shape[3].bit_length() - 1
    zero = torch.zeros_like(effects.D[:, :, 0])  # an empty bucket
    S: Buckets = [None]
    E = None if state is None else state.levels  # (B, H, L0, V, K) the initial buckets
    starts, initial_starts = [], []
    reads: dict[int, list[int]] = {}  # bucket -> chunks reading it
    for i in range(o.shape[2]):
        I = first_chunk + i
        if x.lam is not None:
            S = fenwick_merge_levels(S, I)
        starts.append(S)
        for m in [0] if x.lam is None else [m for m in range(1, len(S)) if (I >> (m - 1)) & 1]:
            reads.setdefault(m, []).append(i)  # empty only before the first chunk of a call with a state
        # every bucket through the chunk in one batched move (the gradient of its transition then sums them
        # in one reduction), then the chunk's keys into bucket 0
        S = list(effects.move(_stacked(S, len(S), zero), i).unbind(2))
        S[0] = S[0] + effects.D[:, :, i]
        if E is not None:
            initial_starts.append(E)
            E = effects.move(E, i)
    for m, chunks in reads.items():
        idx = torch.tensor(chunks, device=o.device)
        Hm = torch.stack([zero if starts[i][m] is None else starts[i][m] for i in chunks], dim=2)  # (B, H, n, V, K)
        Rm = effects.R[:, :, idx]  # (B, H, n, C, K)
        if x.lam is not None:
            Rm = Rm * x.lam[:, :, idx, :, c + m, None]
        o = o.index_add(2, idx, Rm @ Hm.transpose(-1, -2))
    return o, starts, initial_starts


def initial_state_reads(
    x: Chunks, effects: ChunkEffects, initial_starts: list[Tensor], state: LogLinearState, base: Tensor,
    out_levels: int,
) -> Tensor:
    """Step 4: what o reads of the initial state: its bucket l, moved to the chunk start, at level
    max(l, bit_length(p_t ^ last)) (last: the state's last position). Returns (B, H, N, C, V)."""
    B, H, N, C = x.V.shape[:4]
    E_all = torch.stack(initial_starts, dim=2)  # (B, H, N, L0, V, K)
    L0 = E_all.shape[3]
    if x.lam is None:
        W0 = E_all.new_ones(B, H, N, C, L0)
    else:
        pos = base[:, None] + torch.arange(N * C, device=base.device)  # (B, N*C) absolute positions of the slots
        lev = state_bucket_levels(state.last_position, pos, L0).clamp(max=out_levels - 1)  # (B, N*C, L0)
        lev = rearrange(lev, "b (n c) l -> b n c l", c=C)[:, None].expand(B, H, N, C, L0)
        W0 = gather_levels(x.lam, lev)  # (B, H, N, C, L0)
    RW = (W0[..., None] * effects.R[..., None, :]).flatten(-2)  # (B, H, N, C, L0*K)
    return RW @ rearrange(E_all, "b h n l v k -> b h n (l k) v")


def final_state(
    x: Chunks, effects: ChunkEffects, starts: list[Buckets], initial_starts: list[Tensor],
    state: LogLinearState | None, base: Tensor, end: Tensor, out_levels: int,
) -> LogLinearState:
    """Step 5: the state after each sequence's last token (at position end - 1; its last chunk may differ
    across the batch): the buckets at that chunk's start moved through it (bucket m -> level c + m), plus
    the chunk's own keys at their levels 0..c, plus the initial state's buckets moved to the end."""
    B, H, N, C = x.V.shape[:4]
    c = C.bit_length() - 1
    last = end - 1  # (B,)
    n_last = ((last - base) // C).tolist()  # each sequence's last chunk
    Lc = max(len(starts[i]) for i in set(n_last))
    zero = torch.zeros_like(effects.D[:, :, 0])
    stacked = {i: _stacked(starts[i], Lc, zero) for i in set(n_last)}
    at_start = _per_sequence([stacked[i] for i in n_last])
    buckets = effects.move(at_start, n_last)  # (B, H, Lc, V, K)
    last_chunk_start = base + torch.tensor(n_last, device=base.device) * C  # (B,)
    slot_pos = last_chunk_start[:, None] + torch.arange(C, device=base.device)  # (B, C)
    if x.lam is None:
        key_level = torch.zeros(B, C, dtype=torch.int64, device=base.device)
        S_final = buckets
    else:
        key_level = bit_length(last[:, None] ^ slot_pos).clamp(max=out_levels - 1)  # (B, C); padding clamped
        S_final = F.pad(buckets, (0, 0, 0, 0, c, out_levels - c - Lc))  # bucket m -> level c + m
    onehot = F.one_hot(key_level, out_levels).to(buckets.dtype)  # (B, C, Lout)
    keys = torch.einsum("bcl,bhcv,bhck->bhlvk", onehot, _per_sequence(x.V, n_last), _per_sequence(effects.Kd, n_last))
    S_final = S_final + keys
    if state is not None:
        L0 = state.levels.shape[2]
        if x.lam is None:
            into = torch.zeros(B, L0, dtype=torch.int64, device=base.device)
        else:
            into = state_bucket_levels(state.last_position, last[:, None], L0)[:, 0]  # (B, L0)
        E_last = effects.move(_per_sequence([initial_starts[i] for i in n_last]), n_last)
        S_final = S_final + torch.einsum("bjl,bhjvk->bhlvk", F.one_hot(into, out_levels).to(buckets.dtype), E_last)
    return LogLinearState(S_final, end)


def _scalar_decay_reads(R: Tensor, D: Tensor, log_a: Tensor, lam_c: Tensor | None, c: int, out_levels: int) -> Tensor:
    """What every chunk reads from earlier ones under a scalar decay, from chunk 0 on: step 3's loop, per level.

    R (B, H, N, C, K) effective queries, D (B, H, N, V, K) each chunk's keys decayed to its end, log_a (B, H, N)
    each chunk's log-decay. Chunk i reads bucket m >= 1 when bit m-1 of i is set, and that bucket holds the
    chunks with i's higher bits and bit m-1 clear: in groups of 2^m chunks, the second half reads the sum
    of the first half. So each level is one segment sum (weights exp(Lambda_end - Lambda_j) <= 1) and one
    batched read (decay exp(Lambda_{i-1} - Lambda_end) <= 1, lambda^(c+m)). Without lam every level has
    weight 1 (the buckets partition the earlier chunks). Returns (B, H, N, C, V).
    """
    B, H, N, C, K = R.shape
    V = D.shape[-2]
    Np = 1 << (N - 1).bit_length()  # padded to a power of two: padding chunks only read, and are dropped
    pad = Np - N
    Lam = log_a.cumsum(-1)  # (B, H, N) Lambda_i, inclusive; padded by repeating the last (stays non-increasing)
    Lam = torch.cat([Lam, Lam[..., -1:].expand(B, H, pad)], dim=-1)
    prev = F.pad(Lam[..., :-1], (1, 0))  # Lambda_{i-1}
    Rp, Dp = F.pad(R, (0, 0, 0, 0, 0, pad)), F.pad(D, (0, 0, 0, 0, 0, pad)).flatten(-2)  # (B, H, Np, C, K), (.., V*K)
    lam_p = None if lam_c is None else F.pad(lam_c, (0, 0, 0, 0, 0, pad))
    reads = []  # per level, (B, H, Np, C, V)
    for m in range(1, Np.bit_length()):
        size, half = 1 << m, 1 << (m - 1)
        Lg = _grouped(Lam, size)
        end = Lg[..., half - 1 : half]  # (B, H, G, 1) Lambda at the end of each first half
        w = (end - Lg[..., :half]).exp()  # (B, H, G, half)
        S = (w[..., None, :] @ _grouped(Dp, size)[:, :, :, :half]).unflatten(-1, (V, K))  # (B, H, G, 1, V, K)
        scale = (_grouped(prev, size)[..., half:] - end).exp()[..., None, None]  # (B, H, G, half, 1, 1)
        if lam_p is not None:
            scale = scale * _grouped(lam_p[..., min(c + m, out_levels - 1)], size)[:, :, :, half:, :, None]
        Rs = (scale * _grouped(Rp, size)[:, :, :, half:]).flatten(3, 4)  # (B, H, G, half * C, K)
        part = Rs @ S[:, :, :, 0].transpose(-1, -2)  # (B, H, G, half * C, V)
        # the first half of each group reads nothing at this level; padded, not added in place (whose slice
        # updates inductor copies the whole output for, forward and backward)
        reads.append(F.pad(part.unflatten(3, (half, C)), (0, 0, 0, 0, half, 0)).flatten(2, 3))
    return sum(reads[1:], reads[0])[:, :, :N]


def _delta_rule_reads(R: Tensor, D: Tensor, P: Tensor, lam_c: Tensor, c: int, out_levels: int) -> Tensor:
    """What every chunk reads from earlier ones under the delta rule, from chunk 0 on: step 3's loop, per level,
    as `_scalar_decay_reads` reads it for a scalar decay.

    R (B, H, N, C, K) effective queries, D (B, H, N, V, K) each chunk's keys at its end, P (B, H, N, K, K) each
    chunk's transition (S -> S P + D). In groups of 2^m chunks the second half reads, at level c + m, the first
    half's keys carried to its end, E (what the recurrence leaves after the first half alone), moved through the
    chunks of the second half before the reader: H_i = E P_h..P_{i-1}, read as E (P_h..P_{i-1} r_t). Both factors
    come level by level from the two halves of every aligned block: its E = E_1 Pi_2 + E_2 and its product
    Pi = Pi_1 Pi_2, and the product from its start to each of its chunks, X_i (that of the first half, or Pi_1
    times the second half's). Returns (B, H, N, C, V).
    """
    B, H, N, C, K = R.shape
    Np = 1 << (N - 1).bit_length()  # padded to a power of two with chunks that change nothing: they are dropped
    pad = Np - N
    eye = torch.eye(K, dtype=P.dtype, device=P.device)
    E, Pi = F.pad(D, (0, 0, 0, 0, 0, pad)), torch.cat([P, eye.expand(B, H, pad, K, K)], dim=2)
    Rp = F.pad(R, (0, 0, 0, 0, 0, pad))  # (B, H, Np, C, K)
    lam_p = F.pad(lam_c, (0, 0, 0, 0, 0, pad))
    X = None  # (B, H, Np, K, K) the product from each chunk's block start to it; None: blocks of one, identity
    reads = []  # per level, (B, H, Np, C, V)
    for m in range(1, Np.bit_length()):
        size, half = 1 << m, 1 << (m - 1)
        E1, Pi1, Pi2 = E[:, :, 0::2], Pi[:, :, 0::2], Pi[:, :, 1::2]  # (B, H, G, ...) the halves of each group
        Rs = _grouped(Rp, size)[:, :, :, half:]  # (B, H, G, half, C, K)
        if X is not None:
            Xs = _grouped(X, size)[:, :, :, half:]  # (B, H, G, half, K, K)
            Rs = Rs @ Xs.transpose(-1, -2)
        Rs = Rs * _grouped(lam_p[..., min(c + m, out_levels - 1)], size)[:, :, :, half:, :, None]
        part = Rs.flatten(3, 4) @ E1.transpose(-1, -2)  # (B, H, G, half * C, V)
        # the first half of each group reads nothing at this level; padded, not added in place (as there)
        reads.append(F.pad(part.unflatten(3, (half, C)), (0, 0, 0, 0, half, 0)).flatten(2, 3))
        if size < Np:  # the blocks of the next level
            X2 = Pi1[:, :, :, None] if X is None else Pi1[:, :, :, None] @ Xs
            X1 = eye.expand(B, H, Np // size, half, K, K) if X is None else _grouped(X, size)[:, :, :, :half]
            X = torch.cat([X1, X2.expand(B, H, Np // size, half, K, K)], dim=3).flatten(2, 3)
            E, Pi = E1 @ Pi2 + E[:, :, 1::2], Pi1 @ Pi2
    return sum(reads[1:], reads[0])[:, :, :N]


class _UnitLowerInverse(torch.autograd.Function):
    """(I + tril(X, -1))^-1 for square X (..., C, C): the diagonal and the upper part of X are ignored.

    The backward is two matmuls (dX = -tril(T^T dT T^T, -1)); torch's solve_triangular backward on CPU
    copies and loops over the batch.
    """

    @staticmethod
    def forward(ctx, X: Tensor) -> Tensor:
        eye = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device).expand_as(X)
        T = torch.linalg.solve_triangular(X, eye, upper=False, unitriangular=True)
        ctx.save_for_backward(T)
        return T

    @staticmethod
    def backward(ctx, dT: Tensor) -> Tensor:
        (T,) = ctx.saved_tensors
        Tt = T.transpose(-1, -2)
        return (Tt @ dT @ Tt).neg_().tril_(-1)


def _unit_lower_inverse(X: Tensor) -> Tensor:
    return _UnitLowerInverse.apply(X)


class _DecayMatrix(torch.autograd.Function):
    """exp(G_t - G_s) for s <= t, else 0: G (..., C) -> (..., C, C), exp only of non-positive numbers.

    One C x C buffer, filled in place; the backward is dL = dM ⊙ M and its row sums minus its column sums
    (autograd through sub, masked_fill and exp would form three more C x C tensors).
    """

    @staticmethod
    def forward(ctx, G: Tensor) -> Tensor:
        C = G.shape[-1]
        upper = torch.ones(C, C, dtype=torch.bool, device=G.device).triu(1)
        M = (G[..., :, None] - G[..., None, :]).masked_fill_(upper, float("-inf")).exp_()
        ctx.save_for_backward(M)
        return M

    @staticmethod
    def backward(ctx, dM: Tensor) -> Tensor:
        (M,) = ctx.saved_tensors
        dL = dM * M
        return dL.sum(-1) - dL.sum(-2)


def _decay_matrix(G: Tensor) -> Tensor:
    return _DecayMatrix.apply(G)


def _stacked(buckets: Buckets, levels: int, zero: Tensor) -> Tensor:
    """The buckets as one (B, H, levels, V, K) tensor, `zero` (B, H, V, K) where empty or beyond the list."""
    return torch.stack([zero if s is None else s for s in buckets] + [zero] * (levels - len(buckets)), dim=2)


def _grouped(x: Tensor, size: int) -> Tensor:
    """(B, H, N, ...) -> (B, H, N / size, size, ...): the chunk axis as (group, position in group)."""
    return x.unflatten(2, (x.shape[2] // size, size))


def _per_sequence(x: Tensor | list[Tensor], n: list[int] | None = None) -> Tensor:
    """Chunk n[b] of sequence b from x (B, H, N, ...), or row b of x[b] from a list -> (B, H, ...)."""
    if isinstance(x, list):
        return x[0] if all(t is x[0] for t in x) else torch.stack([t[b] for b, t in enumerate(x)])
    if all(i == n[0] for i in n):
        return x[:, :, n[0]]
    return torch.stack([x[b, :, i] for b, i in enumerate(n)])


def _run_grouped(first_chunks: list[int], q, k, v, g, lam, beta, variant, state, out_levels, chunk_size, need_state):
    """Run each group of sequences that start in the same chunk separately, then restore the batch order."""
    groups: dict[int, list[int]] = {}
    for b, first in enumerate(first_chunks):
        groups.setdefault(first, []).append(b)
    outs, levels, positions, order = [], [], [], []
    for rows in groups.values():
        idx = torch.tensor(rows, device=q.device)
        rows_of = [None if x is None else x[idx] for x in (q, k, v, g, lam, beta)]
        sub = LogLinearState(state.levels[idx], state.position[idx])
        o, s = chunk_log_linear_attn(*rows_of, variant, sub, out_levels, chunk_size)
        outs.append(o), levels.append(s.levels), positions.append(s.position), order.extend(rows)
    inverse = torch.argsort(torch.tensor(order, device=q.device))
    final = LogLinearState(torch.cat(levels)[inverse], torch.cat(positions)[inverse]) if need_state else None
    return torch.cat(outs)[inverse], final

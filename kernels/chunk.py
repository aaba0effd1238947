"""Chunkwise log-linear attention in PyTorch: O(T log(T/C)) work, matmul-rich, differentiable.

The sequence is cut into chunks of C = 2^c positions aligned to absolute multiples of C, so every
key s in an earlier chunk J sits, seen from any query in chunk I, at level c + bit_length(I ^ J):
one Fenwick level per chunk pair. Per batch element and head:

1. Intra-chunk (dense C x C, like the naive form): A = Q K^T ⊙ M^S (times (I + L)^-1 diag(beta) for
   the delta rule), masked by M^H_ts = lambda_t^(bit_length(t ^ s)), o = (A ⊙ M^H) V.
2. Per chunk, its effect on a state (the UT/WY form for the delta rule): the chunk's transition
   P = W_first...W_last, its contribution D = sum_s v_s c_s^T with c_s^T = beta_s k_s^T W_{s+1}..W_last,
   and the effective queries r_t = W_first..W_t q_t.
3. Inter-chunk: one pass over the chunks carrying the chunk-level Fenwick state (the recurrence of
   kernels/recurrent.py with chunks as tokens and D as the outer product): at chunk I its bucket m
   holds the keys at level c + m, and o_t += sum_m lambda_t^(c+m) H_m r_t, one (C x L*K)(L*K x V)
   matmul per chunk. A scalar decay from position 0 with no final state wanted (training) skips the loop:
   each level's buckets are segment sums over aligned blocks of chunks (`_scalar_decay_reads`).
4. An initial state's buckets travel with the chunk transitions; bucket l is read at level
   max(l, bit_length(p_t ^ last)). The final state comes from the last chunk's buckets plus that
   chunk's own keys split into levels 0..c.

All gate sums are formed in log space and only exp of non-positive numbers is taken.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from loglinear.kernels.fenwick import bit_length, fenwick_merge, level_matrix, state_bucket_levels
from loglinear.kernels.layout import ChunkLayout
from loglinear.kernels.state import LogLinearState


def chunk_log_linear_attn(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None,
    state: LogLinearState | None, out_levels: int, chunk_size: int, need_state: bool = True,
) -> tuple[Tensor, LogLinearState | None]:
    """Inputs (B, T, H, *) in the compute dtype, lam with `out_levels` levels; returns o (B, T, H, V), final state.

    q and k may have one head shared by all of v's heads (B, T, 1, K): it is broadcast, never copied.
    need_state False skips the final state (returned as None) and the work only it needs.
    """
    B, T, _, K = q.shape
    H, V = v.shape[2:]
    dev, dt = q.device, q.dtype
    C = min(chunk_size, 1 << (T - 1).bit_length())  # no chunk longer than the (rounded-up) sequence
    c = C.bit_length() - 1

    # 0. align chunks to absolute multiples of C: an initial state at position p0 shifts the tokens by p0 mod C.
    #    Sequences whose first chunks differ run as separate groups, so the chunk index is one host integer.
    p0 = torch.zeros(B, dtype=torch.int64, device=dev) if state is None else state.position
    first_chunks = [0] if state is None else (p0 // C).tolist()
    if len(set(first_chunks)) > 1:
        return _run_grouped(first_chunks, q, k, v, g, lam, beta, state, out_levels, chunk_size, need_state)
    first_chunk = first_chunks[0]
    layout = ChunkLayout.build(p0, T, C)
    N, shift = layout.N, layout.shift.long()  # shift (B,): zero-padding slots in front of each sequence
    base = p0 - shift  # (B,) absolute position of the first padded slot
    pos = base[:, None] + torch.arange(N * C, device=dev)  # (B, N*C) absolute positions of the slots
    chunked = lambda x: None if x is None else layout.to_chunks(x).unflatten(2, (N, C))  # noqa: E731
    Q, Kc, Vc, lam_c = (chunked(x) for x in (q, k, v, lam))  # (B, H, N, C, K|K|V|L); Q, Kc may have 1 head
    g_c, beta_c = (chunked(x) for x in (g, beta))  # (B, H, N, C)

    # 1. intra-chunk: decays within the chunk, A, and o = (A ⊙ M^H) V
    G = g_c.cumsum(-1)  # (B, H, N, C) log-decay from the chunk start, inclusive
    MS = _decay_matrix(G)  # (B, H, N, C, C)
    A = (Q @ Kc.transpose(-1, -2)) * MS  # (B, H, N, C, C)
    carry = N > 1 or state is not None or need_state  # anything beyond the dense form within chunks
    if beta_c is not None:
        # the UT form: A <- A T with T = (I + L)^-1 diag(beta), L = tril(diag(beta) K K^T ⊙ M^S, -1)
        Tinv = _unit_lower_inverse(beta_c[..., :, None] * (Kc @ Kc.transpose(-1, -2)) * MS)  # (I + L)^-1
        if lam_c is None:
            o = A @ (Tinv @ (beta_c[..., None] * Vc))  # (B, H, N, C, V): no C x C x C product
        if lam_c is not None or carry:
            A = (A @ Tinv) * beta_c[..., None, :]  # (B, H, N, C, C)
    if lam_c is not None:
        ell = level_matrix(torch.arange(C, device=dev), torch.arange(C, device=dev)).clamp(max=out_levels - 1)
        o = (A * lam_c.gather(-1, ell.expand(B, H, N, C, C))) @ Vc  # (B, H, N, C, V)
    elif beta_c is None:
        o = A @ Vc  # (B, H, N, C, V)
    if not carry:  # one chunk and nothing to carry: the dense form is all
        return layout.from_chunks(o.flatten(2, 3)), None

    # 2. each chunk as a state update: effective queries R, keys Kd, transition P (scalar `a` without beta)
    eG = G.exp()[..., None]  # (B, H, N, C, 1)
    gamma = (G[..., -1:] - G).exp()[..., None]  # (B, H, N, C, 1) decay from s to the chunk end
    if beta_c is None:
        R, Kd = eG * Q, gamma * Kc  # (B, H, N, C, K)
        a = G[..., -1].exp()  # (B, H, N)
        move = lambda S, i: a[:, :, i, None, None, None] * S  # noqa: E731
    else:
        R = eG * Q - A @ (eG * Kc)
        # Kd = T^T (gamma K) with T = (I + L)^-1 diag(beta): diag(beta) (I + L)^-T (gamma K)
        Kd = beta_c[..., None] * (Tinv.transpose(-1, -2) @ (gamma * Kc))
        P = G[..., -1].exp()[..., None, None] * torch.eye(K, dtype=dt, device=dev) - (eG * Kc).transpose(-1, -2) @ Kd
        move = lambda S, i: S @ P[:, :, i, None]  # noqa: E731  (B, H, L, V, K) @ (B, H, 1, K, K)
    D = Vc.transpose(-1, -2) @ Kd  # (B, H, N, V, K)

    if beta_c is None and state is None and not need_state:  # scalar decay from position 0: no loop over chunks
        o = o + _scalar_decay_reads(R, D, G[..., -1], lam_c, c, out_levels)
        return layout.from_chunks(o.flatten(2, 3)), None

    # 3. inter-chunk: the chunk-level Fenwick pass (the state grows as levels fill). At chunk i, bucket m >= 1
    #    holds the keys at level c + m and is non-empty exactly when bit m-1 of the chunk's index is set:
    #    only those (chunk, bucket) pairs are read, half of all on average.
    E = None if state is None else state.levels  # (B, H, L0, V, K) the initial buckets
    S = torch.zeros(B, H, 1, V, K, dtype=dt, device=dev)
    starts, E_starts = [], []  # per chunk: the buckets at its start
    reads: dict[int, list[int]] = {}  # bucket -> chunks reading it
    for i in range(N):
        I = first_chunk + i
        if lam is not None:
            S = fenwick_merge(S, I)
        starts.append(S)
        for m in [0] if lam is None else [m for m in range(1, S.shape[2]) if (I >> (m - 1)) & 1]:
            reads.setdefault(m, []).append(i)
        S = move(S, i)
        S = torch.cat([S[:, :, :1] + D[:, :, i, None], S[:, :, 1:]], dim=2)
        if E is not None:
            E_starts.append(E)
            E = move(E, i)
    for m, chunks in reads.items():
        idx = torch.tensor(chunks, device=dev)
        Hm = torch.stack([starts[i][:, :, m] for i in chunks], dim=2)  # (B, H, n, V, K)
        Rm = R[:, :, idx] if lam is None else R[:, :, idx] * lam_c[:, :, idx, :, c + m, None]  # (B, H, n, C, K)
        o = o.index_add(2, idx, Rm @ Hm.transpose(-1, -2))

    # 4. initial state: bucket l read at level max(l, bit_length(p_t ^ last))
    if state is not None:
        E_all = torch.stack(E_starts, dim=2)  # (B, H, N, L0, V, K)
        L0 = E_all.shape[3]
        if lam is None:
            W0 = torch.ones(B, H, N, C, L0, dtype=dt, device=dev)
        else:
            lev = state_bucket_levels(state.last_position, pos, L0).clamp(max=out_levels - 1)  # (B, N*C, L0)
            lev = rearrange(lev, "b (n c) l -> b n c l", c=C)[:, None].expand(B, H, N, C, L0)
            W0 = lam_c.gather(-1, lev)  # (B, H, N, C, L0)
        RW = (W0[..., None] * R[..., None, :]).flatten(-2)  # (B, H, N, C, L0*K)
        o = o + RW @ rearrange(E_all, "b h n l v k -> b h n (l k) v")

    if not need_state:
        return layout.from_chunks(o.flatten(2, 3)), None

    # 5. final state, read at each sequence's last position (its last chunk may differ across the batch)
    last = p0 + T - 1  # (B,)
    n_last = ((T - 1 + shift) // C).tolist()
    at_last = lambda x: _per_sequence(x, n_last)  # noqa: E731  (B, H, N, ...) -> (B, H, ...)
    last_move = (lambda S: S * at_last(a)[:, :, None, None, None]) if beta_c is None else (lambda S: S @ at_last(P)[:, :, None])
    Lc = max(starts[i].shape[2] for i in set(n_last))
    buckets = last_move(_per_sequence([F.pad(starts[i], (0, 0, 0, 0, 0, Lc - starts[i].shape[2])) for i in n_last]))
    slot_pos = base[:, None] + torch.tensor(n_last, device=dev)[:, None] * C + torch.arange(C, device=dev)  # (B, C)
    if lam is None:
        key_level = torch.zeros(B, C, dtype=torch.int64, device=dev)
        S_final = buckets
    else:
        key_level = bit_length(last[:, None] ^ slot_pos).clamp(max=out_levels - 1)  # (B, C); padding clamped
        S_final = F.pad(buckets, (0, 0, 0, 0, c, out_levels - c - Lc))  # bucket m -> level c + m
    onehot = F.one_hot(key_level, out_levels).to(dt)  # (B, C, Lout)
    S_final = S_final + torch.einsum("bcl,bhcv,bhck->bhlvk", onehot, at_last(Vc), at_last(Kd))
    if state is not None:
        into = state_bucket_levels(state.last_position, last[:, None], L0)[:, 0] if lam is not None else torch.zeros(
            B, L0, dtype=torch.int64, device=dev
        )
        E_last = _per_sequence([E_starts[i] for i in n_last])
        S_final = S_final + torch.einsum("bjl,bhjvk->bhlvk", F.one_hot(into, out_levels).to(dt), last_move(E_last))
    return layout.from_chunks(o.flatten(2, 3)), LogLinearState(S_final, p0 + T)


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
    out = R.new_zeros(B, H, Np, C, V)
    for m in range(1, Np.bit_length()):
        size, half = 1 << m, 1 << (m - 1)
        grp = lambda x: x.unflatten(2, (Np >> m, size))  # noqa: E731  chunk axis -> (group, position in group)
        Lg = grp(Lam)
        end = Lg[..., half - 1 : half]  # (B, H, G, 1) Lambda at the end of each first half
        w = (end - Lg[..., :half]).exp()  # (B, H, G, half)
        S = (w[..., None, :] @ grp(Dp)[:, :, :, :half]).unflatten(-1, (V, K))  # (B, H, G, 1, V, K)
        scale = (grp(prev)[..., half:] - end).exp()[..., None, None]  # (B, H, G, half, 1, 1)
        if lam_p is not None:
            scale = scale * grp(lam_p[..., min(c + m, out_levels - 1)])[:, :, :, half:, :, None]
        Rs = (scale * grp(Rp)[:, :, :, half:]).flatten(3, 4)  # (B, H, G, half * C, K)
        part = Rs @ S[:, :, :, 0].transpose(-1, -2)  # (B, H, G, half * C, V)
        grp(out)[:, :, :, half:] += part.unflatten(3, (half, C))
    return out[:, :, :N]


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


def _per_sequence(x: Tensor | list[Tensor], n: list[int] | None = None) -> Tensor:
    """Chunk n[b] of sequence b from x (B, H, N, ...), or row b of x[b] from a list -> (B, H, ...)."""
    if isinstance(x, list):
        return x[0] if all(t is x[0] for t in x) else torch.stack([t[b] for b, t in enumerate(x)])
    if all(i == n[0] for i in n):
        return x[:, :, n[0]]
    return torch.stack([x[b, :, i] for b, i in enumerate(n)])


def _run_grouped(first_chunks: list[int], q, k, v, g, lam, beta, state, out_levels, chunk_size, need_state):
    """Run each group of sequences that start in the same chunk separately, then restore the batch order."""
    groups: dict[int, list[int]] = {}
    for b, first in enumerate(first_chunks):
        groups.setdefault(first, []).append(b)
    outs, levels, positions, order = [], [], [], []
    for rows in groups.values():
        idx = torch.tensor(rows, device=q.device)
        pick = lambda x: None if x is None else x[idx]  # noqa: E731
        sub = LogLinearState(state.levels[idx], state.position[idx])
        o, s = chunk_log_linear_attn(*map(pick, (q, k, v, g, lam, beta)), sub, out_levels, chunk_size)
        outs.append(o), levels.append(s.levels), positions.append(s.position), order.extend(rows)
    inverse = torch.argsort(torch.tensor(order, device=q.device))
    cat = lambda xs: torch.cat(xs)[inverse]  # noqa: E731
    return cat(outs), (LogLinearState(cat(levels), cat(positions)) if need_state else None)

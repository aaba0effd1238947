"""Intra-chunk Triton kernels: o = (A ⊙ M^H) V inside each chunk, forward and backward.

A is the chunk's C x C score matrix. For log-linear Mamba-2 it is computed in the kernel,
A_ts = (q_t . k_s) exp(G_t - G_s) for s <= t (the "qk" mode); for the delta rule it comes from
`delta_prep` (the "A" mode). The hierarchical mask M^H_ts = lambda_t^(bit_length(t ^ s)) is built
in the kernel from the slots' bits: no T x T or C x C level table is read. One program per
(chunk, batch * head); V is processed in blocks of BV, K in blocks of BK.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from loglinear.kernels.fused.common import (
    alloc,
    check_chunk_size,
    level_of,
    num_warps,
    pow2,
    slot_rows,
    token_tile,
)
from loglinear.kernels.layout import ChunkLayout


@triton.jit
def _qk_scores(
    q_ptr, k_ptr, G_ptr, b, h, i, t, valid, T, H, HK, N, K, C: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr
):
    """A_ts = (q_t . k_s) exp(G_t - G_s) on s <= t (C, C), the chunk's G (C,), and the decay mask MS (C, C)."""
    r = tl.arange(0, C)
    hk = h // (H // HK)
    G = tl.load(G_ptr + (b * H + h) * N * C + i * C + r)  # (C,)
    S = tl.zeros((C, C), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rows, m = token_tile(b, hk, t, valid, k0 + tl.arange(0, BK), T, HK, K)
        qb = tl.load(q_ptr + rows, mask=m, other=0.0).to(tl.float32)  # (C, BK)
        kb = tl.load(k_ptr + rows, mask=m, other=0.0).to(tl.float32)  # (C, BK)
        S += tl.dot(qb, tl.trans(kb), input_precision=PREC)
    causal = r[:, None] >= r[None, :]
    MS = tl.where(causal, tl.exp(tl.where(causal, G[:, None] - G[None, :], 0.0)), 0.0)  # (C, C)
    return S * MS, MS


@triton.jit
def _scores(q_ptr, k_ptr, G_ptr, A_ptr, b, h, i, t, valid, T, H, HK, N, K,
            C: tl.constexpr, BK: tl.constexpr, QK_MODE: tl.constexpr, PREC: tl.constexpr):
    """The chunk's A (C, C): formed from q, k, G (qk mode, with its decay mask MS) or loaded (A mode, MS = A unused)."""
    if QK_MODE:
        A, MS = _qk_scores(q_ptr, k_ptr, G_ptr, b, h, i, t, valid, T, H, HK, N, K, C, BK, PREC)
    else:
        r = tl.arange(0, C)
        A = tl.load(A_ptr + (((b * H + h) * N + i).to(tl.int64) * C + r[:, None]) * C + r[None, :])  # (C, C)
        MS = A
    return A, MS


@triton.jit
def _lam_mask(lam_ptr, b, h, t, valid, T, H, L, NL, C: tl.constexpr):
    """M^H_ts = lambda_t^(bit_length(t ^ s)) for slots t, s of one chunk (C, C); levels >= NL are 0."""
    r = tl.arange(0, C)
    lev = tl.minimum(level_of(r[:, None] ^ r[None, :]), L - 1)  # (C, C)
    M = tl.zeros((C, C), dtype=tl.float32)
    for l in range(0, NL):
        lam_off = ((b * T + t).to(tl.int64) * H + h) * L + l
        lam_l = tl.load(lam_ptr + lam_off, mask=valid, other=0.0).to(tl.float32)  # (C,)
        M = tl.where(lev == l, lam_l[:, None], M)
    return M, lev


@triton.jit
def intra_fwd_kernel(
    q_ptr, k_ptr, G_ptr, A_ptr, v_ptr, lam_ptr, o_ptr, shift_ptr,
    T, H, HK, N, K, V, L, NL,
    C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    QK_MODE: tl.constexpr, HAS_LAM: tl.constexpr, PREC: tl.constexpr,
):
    """o (B, T, H, V) float32 = (A ⊙ M^H) V for chunk program_id(0) of batch*head program_id(1)."""
    i, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    t, valid = slot_rows(b, i, shift_ptr, T, C)
    A, _ = _scores(q_ptr, k_ptr, G_ptr, A_ptr, b, h, i, t, valid, T, H, HK, N, K, C, BK, QK_MODE, PREC)
    if HAS_LAM:
        M, _ = _lam_mask(lam_ptr, b, h, t, valid, T, H, L, NL, C)
        A = A * M
    for v0 in range(0, V, BV):
        rows, m = token_tile(b, h, t, valid, v0 + tl.arange(0, BV), T, H, V)
        vb = tl.load(v_ptr + rows, mask=m, other=0.0).to(tl.float32)  # (C, BV)
        o = tl.dot(A, vb, input_precision=PREC)  # (C, BV)
        tl.store(o_ptr + rows, o, mask=m)


@triton.jit
def intra_bwd_kernel(
    q_ptr, k_ptr, G_ptr, A_ptr, v_ptr, lam_ptr, do_ptr, shift_ptr,
    dq_ptr, dk_ptr, dG_ptr, dA_ptr, dv_ptr, dlam_ptr,
    T, H, HK, N, K, V, L, NL,
    C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    QK_MODE: tl.constexpr, HAS_LAM: tl.constexpr, PREC: tl.constexpr,
):
    """Gradients of the intra-chunk term: dv, dlam (levels < NL), and dq, dk, dG (qk mode) or dA (A mode).

    dq, dk are per v-head (B, T, H, K) float32 (the caller sums GQA groups); dG (B, H, N*C); dA
    (B, H, N, C, C); dlam (B, T, H, NL); dv (B, T, H, V) float32.
    """
    i, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    r = tl.arange(0, C)
    t, valid = slot_rows(b, i, shift_ptr, T, C)
    A, MS = _scores(q_ptr, k_ptr, G_ptr, A_ptr, b, h, i, t, valid, T, H, HK, N, K, C, BK, QK_MODE, PREC)
    # 1. dP = dO V^T (C, C)
    dP = tl.zeros((C, C), dtype=tl.float32)
    for v0 in range(0, V, BV):
        rows, m = token_tile(b, h, t, valid, v0 + tl.arange(0, BV), T, H, V)
        vb = tl.load(v_ptr + rows, mask=m, other=0.0).to(tl.float32)  # (C, BV)
        dob = tl.load(do_ptr + rows, mask=m, other=0.0)  # (C, BV)
        dP += tl.dot(dob, tl.trans(vb), input_precision=PREC)
    # 2. the mask: dlam_t^(l) = sum over s at level l of dP_ts A_ts; dA = dP ⊙ M
    AM = A
    dA = dP
    if HAS_LAM:
        M, lev = _lam_mask(lam_ptr, b, h, t, valid, T, H, L, NL, C)
        AM = A * M
        dA = dP * M
        W = dP * A
        for l in range(0, NL):
            dl = tl.sum(tl.where(lev == l, W, 0.0), axis=1)  # (C,)
            tl.store(dlam_ptr + ((b * T + t).to(tl.int64) * H + h) * NL + l, dl, mask=valid)
    # 3. dv = (A ⊙ M)^T dO
    for v0 in range(0, V, BV):
        rows, m = token_tile(b, h, t, valid, v0 + tl.arange(0, BV), T, H, V)
        dob = tl.load(do_ptr + rows, mask=m, other=0.0)  # (C, BV)
        tl.store(dv_ptr + rows, tl.dot(tl.trans(AM), dob, input_precision=PREC), mask=m)
    # 4. back through A: into q, k and G (qk mode), or out as dA
    if QK_MODE:
        dS = dA * MS  # (C, C) gradient of the raw scores q_t . k_s
        W = dA * A
        dG = tl.sum(W, axis=1) - tl.sum(W, axis=0)  # (C,)
        tl.store(dG_ptr + (bh * N + i) * C + r, dG)
        hk = h // (H // HK)
        for k0 in range(0, K, BK):
            kk = k0 + tl.arange(0, BK)
            src, m = token_tile(b, hk, t, valid, kk, T, HK, K)
            dst, _ = token_tile(b, h, t, valid, kk, T, H, K)
            qb = tl.load(q_ptr + src, mask=m, other=0.0).to(tl.float32)  # (C, BK)
            kb = tl.load(k_ptr + src, mask=m, other=0.0).to(tl.float32)  # (C, BK)
            tl.store(dq_ptr + dst, tl.dot(dS, kb, input_precision=PREC), mask=m)
            tl.store(dk_ptr + dst, tl.dot(tl.trans(dS), qb, input_precision=PREC), mask=m)
    else:
        tl.store(dA_ptr + ((bh * N + i).to(tl.int64) * C + r[:, None]) * C + r[None, :], dA)


def _blocks(K: int, V: int) -> tuple[int, int]:
    return min(pow2(K), 64), min(pow2(V), 64)


def intra_forward(q, k, G, A, v: Tensor, lam: Tensor | None, layout: ChunkLayout, prec: str) -> Tensor:
    """o (B, T, H, V) float32, the intra-chunk term; pass q, k, G (qk mode: the scalar decay) or A (A mode:
    the delta rule's intra matrix from delta_prep)."""
    check_chunk_size(layout.C)
    B, T, H, V = v.shape
    qk_mode = A is None
    K = q.shape[-1] if qk_mode else 0
    HK = q.shape[2] if qk_mode else H
    L = 1 if lam is None else lam.shape[-1]
    BK, BV = _blocks(max(K, 1), V)
    o = alloc(B, T, H, V, like=v)
    intra_fwd_kernel[(layout.N, B * H)](
        q, k, G, A, v, lam, o, layout.shift, T, H, HK, layout.N, K, V, L, min(layout.c + 1, L),
        C=layout.C, BK=BK, BV=BV, QK_MODE=qk_mode, HAS_LAM=lam is not None, PREC=prec,
        num_warps=num_warps(layout.C * layout.C, layout.C * BK, layout.C * BV),
    )
    return o


def intra_backward(q, k, G, A, v: Tensor, lam: Tensor | None, do: Tensor, layout: ChunkLayout, prec: str):
    """(dq, dk, dG) in qk mode or dA in A mode, then dv (B, T, H, V) and dlam (B, T, H, NL) or None."""
    B, T, H, V = v.shape
    qk_mode = A is None
    K = q.shape[-1] if qk_mode else 0
    HK = q.shape[2] if qk_mode else H
    L = 1 if lam is None else lam.shape[-1]
    NL = min(layout.c + 1, L)
    BK, BV = _blocks(max(K, 1), V)
    dv = alloc(B, T, H, V, like=v)
    dlam = alloc(B, T, H, NL, like=v) if lam is not None else None
    if qk_mode:
        dq, dk = alloc(B, T, H, K, like=v), alloc(B, T, H, K, like=v)
        dG, dA = alloc(B, H, layout.N * layout.C, like=v), None
    else:
        dq = dk = dG = None
        dA = alloc(B, H, layout.N, layout.C, layout.C, like=v)
    intra_bwd_kernel[(layout.N, B * H)](
        q, k, G, A, v, lam, do, layout.shift, dq, dk, dG, dA, dv, dlam,
        T, H, HK, layout.N, K, V, L, NL,
        C=layout.C, BK=BK, BV=BV, QK_MODE=qk_mode, HAS_LAM=lam is not None, PREC=prec,
        num_warps=num_warps(layout.C * layout.C, layout.C * BK, layout.C * BV),
    )
    return (dq, dk, dG) if qk_mode else dA, dv, dlam

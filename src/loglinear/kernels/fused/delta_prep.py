"""Delta-rule prep of log-linear Gated DeltaNet: per chunk, the UT/WY quantities A, R, Kd, P (Triton).

Per (batch b, v-head h, chunk i), in float32, with Q, Kc the chunk's C x K slot rows of q, k (zero on
padding slots; v-head h reads q/k head h // (H // Hk)), G (C,) the inclusive g-cumsum inside the
chunk, Gend = G[C-1] and beta (C,):

    MS[t,s] = exp(G[t] - G[s]) if s <= t else 0          (masked before exp: no exp of a positive number)
    Lm      = strictly_lower(beta[t] (Kc[t] . Kc[s]) MS[t,s])
    X       = (I + Lm)^-1,  Tb = X diag(beta)            (forward substitution on rows, in-kernel)
    A       = ((Q Kc^T) * MS) Tb                          (C x C, lower triangular)
    R       = eG * Q - A (eG * Kc),  eG = exp(G)[:, None] (C x K, the effective queries)
    Kd      = Tb^T (gamma * Kc),  gamma = exp(Gend - G)[:, None]
    P       = exp(Gend) I_K - (eG * Kc)^T Kd              (K x K, the chunk's state transition)

These are steps 1-2 of kernels/chunk.py for beta != None. A and P are stored per chunk
(B, H, N, ...), R and Kd per token (B, T, H, K). The backward kernel recomputes the C x C
intermediates and applies the chain rule in reverse; with dX = dTb diag(beta) the solve's
gradient is dLm = -strictly_lower(X^T dX X^T), and a gradient W = dMS * MS flows to G as
dG[t] += sum_s W[t,s], dG[s] -= sum_t W[t,s].

One program handles one (b, h, chunk) with full K tiles, so K <= MAX_K = 64 and 16 <= C <= 64 (C a
power of two): at K = 128 the backward asked for more shared memory than a block gets (360,448 bytes
on sm_90a, 196,608 on sm_80, Triton 3.9); at K = 64 it asks for 131,072 and 65,536 (the offline test
in tests/kernels/test_fused_compile.py reads the compiled size). Compiled for sm_90a with bf16 inputs
(ptxas -v, Triton 3.9, no timing yet), the backward spills registers at C = 64: about 1.4 KB per
thread at K = 16 and 3.5 KB at K = 64 (benchmarks/RESULTS.md); blocking over K would cut that if it
shows in timings.

Transposes of a `tl.dot` result go through memory (`_transposed`), not `tl.trans`: Triton before
3.7.1 miscompiles that transpose on Hopper for 64-wide blocks in tf32 (flash-linear-attention met it
in its gated delta-rule backward: wrong dk, dg, dbeta, right dq and dv, right in float32), exactly
the symptom this backward showed on an H100 with Triton 3.6. Its dots are exact in every dtype: in tf32 the
backward read out of bounds of shared memory on an H100 with Triton 3.6 (compute-sanitizer); exact, every GPU
test of the delta rule passed there in bf16 and float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from torch.autograd.function import once_differentiable

from loglinear.kernels.fused.common import alloc, pow2, slot_rows
from loglinear.kernels.layout import ChunkLayout, sum_head_groups
from loglinear.kernels.triton_limits import MAX_K as TRITON_MAX_K
from loglinear.kernels.variant import Variant

MAX_K = TRITON_MAX_K[Variant.DELTA_RULE]
MAX_C = 64


@triton.jit
def _rows(ptr, b, t, valid, head, T, NH, K: tl.constexpr, BK: tl.constexpr):
    """Rows t (C,) of head `head` of a (B, T, NH, K) tensor as a (C, BK) float32 tile, zero where not valid."""
    kk = tl.arange(0, BK)
    off = ((b * T + t).to(tl.int64) * NH + head)[:, None] * K + kk[None, :]  # (C, BK)
    return tl.load(ptr + off, mask=valid[:, None] & (kk < K)[None, :], other=0.0).to(tl.float32)


@triton.jit
def _store_rows(ptr, x, b, t, valid, head, T, NH, K: tl.constexpr, BK: tl.constexpr):
    """Store a (C, BK) tile into rows t (C,) of head `head` of a (B, T, NH, K) tensor, where valid."""
    kk = tl.arange(0, BK)
    off = ((b * T + t).to(tl.int64) * NH + head)[:, None] * K + kk[None, :]  # (C, BK)
    tl.store(ptr + off, x, mask=valid[:, None] & (kk < K)[None, :])


@triton.jit
def _transposed(x, scratch, R: tl.constexpr, S: tl.constexpr):
    """x^T (S, R) of an (R, S) tile, through this program's scratch (R * S float32) in memory (module docstring)."""
    r, s = tl.arange(0, R), tl.arange(0, S)
    tl.debug_barrier()  # an earlier transpose has read the scratch
    tl.store(scratch + r[:, None] * S + s[None, :], x)
    tl.debug_barrier()
    return tl.load(scratch + s[:, None] + r[None, :] * S)


@triton.jit
def _chunk_solve(
    q_ptr, k_ptr, G_ptr, beta_ptr, b, h, i, t, valid, T, N,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
):
    """Chunk i of (b, h): G, beta (C,) and the C x C matrices S = Q Kc^T, KK = Kc Kc^T, MS, X = (I + Lm)^-1.

    Q and Kc are not returned: callers reload them (cache hits) where needed rather than keep them
    live through the solve.
    """
    rows = tl.arange(0, C)
    Q = _rows(q_ptr, b, t, valid, h // (H // HK), T, HK, K, BK)  # (C, BK)
    Kc = _rows(k_ptr, b, t, valid, h // (H // HK), T, HK, K, BK)  # (C, BK)
    S = tl.dot(Q, tl.trans(Kc), input_precision=PREC)  # (C, C)
    KK = tl.dot(Kc, tl.trans(Kc), input_precision=PREC)  # (C, C)
    G = tl.load(G_ptr + (b * H + h).to(tl.int64) * N * C + i * C + rows)  # (C,)
    beta = tl.load(beta_ptr + (b * T + t).to(tl.int64) * H + h, mask=valid, other=0.0).to(tl.float32)  # (C,)

    MS = tl.exp(tl.where(rows[:, None] >= rows[None, :], G[:, None] - G[None, :], float("-inf")))  # (C, C)
    Lm = tl.where(rows[:, None] > rows[None, :], beta[:, None] * KK * MS, 0.0)  # (C, C)
    # forward substitution: row r of X is e_r - sum_{s<r} Lm[r,s] X[s], rows s < r already final
    X = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)  # (C, C)
    for r in range(1, C):
        lm_r = tl.sum(tl.where(rows[:, None] == r, Lm, 0.0), 0)  # (C,) row r of Lm
        X = tl.where(rows[:, None] == r, X - tl.sum(lm_r[:, None] * X, 0)[None, :], X)
    return G, beta, MS, S, KK, X


@triton.jit
def _program(shift_ptr, T, N, H: tl.constexpr, C: tl.constexpr, BK: tl.constexpr):
    """This program's chunk i, sequence b, v-head h, slot and K indices, flat chunk index and its slots' tokens."""
    i, bh = tl.program_id(0), tl.program_id(1)
    b = bh // H
    t, valid = slot_rows(b, i, shift_ptr, T, C)  # (C,) token of each slot
    return i, b, bh % H, tl.arange(0, C), tl.arange(0, BK), bh.to(tl.int64) * N + i, t, valid


@triton.jit
def _delta_prep_fwd_kernel(
    q_ptr, k_ptr, G_ptr, beta_ptr, shift_ptr,  # q, k (B, T, HK, K); G (B, H, N*C); beta (B, T, H); shift (B,)
    A_ptr, R_ptr, Kd_ptr, P_ptr,  # A (B, H, N, C, C); R, Kd (B, T, H, K); P (B, H, N, K, K)
    T, N,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
):
    """One (chunk, b*H + h) program: A, R, Kd, P of that chunk (module docstring)."""
    i, b, h, rows, kk, chunk, t, valid = _program(shift_ptr, T, N, H, C, BK)
    G, beta, MS, S, KK, X = _chunk_solve(q_ptr, k_ptr, G_ptr, beta_ptr, b, h, i, t, valid, T, N, H, HK, K, C, BK, PREC)

    Tb = X * beta[None, :]  # (C, C)
    A = tl.dot(S * MS, Tb, input_precision=PREC)  # (C, C)
    tl.store(A_ptr + chunk * C * C + rows[:, None] * C + rows[None, :], A)

    Gend = tl.load(G_ptr + chunk * C + C - 1)
    eG = tl.exp(G)[:, None]  # (C, 1)
    Q = _rows(q_ptr, b, t, valid, h // (H // HK), T, HK, K, BK)  # (C, BK)
    Kc = _rows(k_ptr, b, t, valid, h // (H // HK), T, HK, K, BK)  # (C, BK)
    Ke = eG * Kc  # (C, BK)
    _store_rows(R_ptr, eG * Q - tl.dot(A, Ke, input_precision=PREC), b, t, valid, h, T, H, K, BK)
    Kd = tl.dot(tl.trans(Tb), tl.exp(Gend - G)[:, None] * Kc, input_precision=PREC)  # (C, BK)
    _store_rows(Kd_ptr, Kd, b, t, valid, h, T, H, K, BK)

    P = tl.where(kk[:, None] == kk[None, :], tl.exp(Gend), 0.0) - tl.dot(tl.trans(Ke), Kd, input_precision=PREC)
    in_kk = (kk < K)[:, None] & (kk < K)[None, :]
    tl.store(P_ptr + chunk * K * K + kk[:, None] * K + kk[None, :], P, mask=in_kk)  # (BK, BK)


@triton.jit
def _delta_prep_bwd_kernel(
    q_ptr, k_ptr, G_ptr, beta_ptr, shift_ptr,  # as in the forward kernel
    dA_ptr, dR_ptr, dKd_ptr, dP_ptr,  # upstream gradients, shaped like A, R, Kd, P (unused where HAS_* is False)
    dq_ptr, dk_ptr, dG_ptr, dbeta_ptr,  # dq, dk (B, T, H, K) per v-head; dG (B, H, N*C); dbeta (B, T, H); float32
    scratch_ptr,  # (B, H, N, C * max(C, BK)) float32, each program's own, for `_transposed`
    T, N,
    H: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
    HAS_DA: tl.constexpr, HAS_DR: tl.constexpr, HAS_DKD: tl.constexpr, HAS_DP: tl.constexpr,
):
    """One (chunk, b*H + h) program: recompute the chunk's forward, then dq, dk, dG, dbeta of that chunk."""
    i, b, h, rows, kk, chunk, t, valid = _program(shift_ptr, T, N, H, C, BK)
    G, beta, MS, S, KK, X = _chunk_solve(q_ptr, k_ptr, G_ptr, beta_ptr, b, h, i, t, valid, T, N, H, HK, K, C, BK, PREC)
    scratch = scratch_ptr + chunk * C * (C if C > BK else BK)

    Tb = X * beta[None, :]  # (C, C)
    Aq = S * MS  # (C, C)
    Gend = tl.load(G_ptr + chunk * C + C - 1)
    eG = tl.exp(G)  # (C,)
    gamma = tl.exp(Gend - G)  # (C,)
    Kc = _rows(k_ptr, b, t, valid, h // (H // HK), T, HK, K, BK)  # (C, BK)

    # gradients reaching A, Kd, Ke (= eG * Kc) and Q from the four outputs
    dA = tl.zeros((C, C), dtype=tl.float32)
    dKd = tl.zeros((C, BK), dtype=tl.float32)
    dKe = tl.zeros((C, BK), dtype=tl.float32)
    dQ = tl.zeros((C, BK), dtype=tl.float32)
    deG = tl.zeros((C,), dtype=tl.float32)  # gradient of exp(G)
    dGend = 0.0
    if HAS_DA:
        dA += tl.load(dA_ptr + chunk * C * C + rows[:, None] * C + rows[None, :])
    if HAS_DKD:
        dKd += _rows(dKd_ptr, b, t, valid, h, T, H, K, BK)
    if HAS_DP:  # P = exp(Gend) I - Ke^T Kd
        in_kk = (kk < K)[:, None] & (kk < K)[None, :]
        dP = tl.load(dP_ptr + chunk * K * K + kk[:, None] * K + kk[None, :], mask=in_kk, other=0.0)  # (BK, BK)
        Kd = tl.dot(tl.trans(Tb), gamma[:, None] * Kc, input_precision=PREC)  # (C, BK)
        dKe -= tl.dot(Kd, tl.trans(dP), input_precision=PREC)
        dKd -= tl.dot(eG[:, None] * Kc, dP, input_precision=PREC)
        dGend += tl.sum(tl.where(kk[:, None] == kk[None, :], dP, 0.0)) * tl.exp(Gend)
    if HAS_DR:  # R = eG * Q - A Ke
        dR = _rows(dR_ptr, b, t, valid, h, T, H, K, BK)  # (C, BK)
        Q = _rows(q_ptr, b, t, valid, h // (H // HK), T, HK, K, BK)  # (C, BK)
        dQ += eG[:, None] * dR
        deG += tl.sum(Q * dR, 1)
        dA -= tl.dot(dR, tl.trans(eG[:, None] * Kc), input_precision=PREC)
        dKe -= tl.dot(_transposed(tl.dot(Aq, Tb, input_precision=PREC), scratch, C, C), dR, input_precision=PREC)

    # A = Aq Tb, Kd = Tb^T Kg with Kg = gamma * Kc; Ke and Kg pass their gradients on to Kc and G
    dTb = tl.dot(_transposed(Aq, scratch, C, C), dA, input_precision=PREC)
    dTb += tl.dot(gamma[:, None] * Kc, _transposed(dKd, scratch, C, BK), input_precision=PREC)  # (C, C)
    dKg = tl.dot(Tb, dKd, input_precision=PREC)  # (C, BK)
    dK = eG[:, None] * dKe + gamma[:, None] * dKg  # (C, BK)
    deG += tl.sum(Kc * dKe, 1)
    dgamma = tl.sum(Kc * dKg, 1) * gamma  # (C,) gradient of Gend - G
    dG = deG * eG - dgamma  # (C,)
    dG += tl.where(rows == C - 1, dGend + tl.sum(dgamma, 0), 0.0)

    # Aq = (Q Kc^T) * MS; a gradient W = dMS * MS reaches G as rowsum(W) - colsum(W)
    dAq = tl.dot(dA, tl.trans(Tb), input_precision=PREC)  # (C, C)
    dS = dAq * MS  # (C, C)
    dQ += tl.dot(dS, Kc, input_precision=PREC)
    dK += tl.dot(_transposed(dS, scratch, C, C), _rows(q_ptr, b, t, valid, h // (H // HK), T, HK, K, BK),
                 input_precision=PREC)
    W = dS * S  # (C, C)
    dG += tl.sum(W, 1) - tl.sum(W, 0)

    # Tb = X diag(beta), X = (I + Lm)^-1, Lm = strictly_lower(beta[t] KK MS)
    dbeta = tl.sum(dTb * X, 0)  # (C,)
    dLm = -tl.dot(tl.dot(tl.trans(X), dTb * beta[None, :], input_precision=PREC), tl.trans(X), input_precision=PREC)
    dLm = tl.where(rows[:, None] > rows[None, :], dLm, 0.0) * MS  # (C, C) gradient of beta[t] KK
    dbeta += tl.sum(dLm * KK, 1)
    dKK = dLm * beta[:, None]  # (C, C)
    dK += tl.dot(dKK + _transposed(dKK, scratch, C, C), Kc, input_precision=PREC)
    W = dKK * KK  # (C, C)
    dG += tl.sum(W, 1) - tl.sum(W, 0)

    _store_rows(dq_ptr, dQ, b, t, valid, h, T, H, K, BK)
    _store_rows(dk_ptr, dK, b, t, valid, h, T, H, K, BK)
    tl.store(dG_ptr + chunk * C + rows, dG)
    tl.store(dbeta_ptr + (b * T + t).to(tl.int64) * H + h, dbeta, mask=valid)


def _check(q: Tensor, k: Tensor, G: Tensor, beta: Tensor, layout: ChunkLayout) -> None:
    """ValueError for sizes the kernels do not support or shapes that do not fit together."""
    B, T, HK, K = q.shape
    H = beta.shape[2]
    C, N = layout.C, layout.N
    if not (16 <= C <= MAX_C and C & (C - 1) == 0):
        raise ValueError(f"delta_prep needs a power-of-two chunk size in [16, {MAX_C}], got {C}")
    if K > MAX_K:
        raise ValueError(f"delta_prep supports head dims K <= {MAX_K}, got {K}")
    if G.dtype != torch.float32:
        raise ValueError(f"delta_prep needs G in float32, got {G.dtype}")
    if k.shape != q.shape or beta.shape != (B, T, H) or H % HK or G.shape != (B, H, N * C) or layout.T != T:
        raise ValueError(
            f"delta_prep: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, G {tuple(G.shape)}, beta {tuple(beta.shape)}"
            f" do not match a layout of T={layout.T}, N={N}, C={C}"
        )


def _meta(q: Tensor, beta: Tensor, layout: ChunkLayout) -> dict:
    """Launch constants shared by both kernels."""
    HK, K = q.shape[2:]
    BK = pow2(K)
    return dict(
        # exact dots in every dtype: their tf32 form read out of bounds of shared memory in the backward on an
        # H100 with Triton 3.6 (compute-sanitizer), and this kernel is a small part of the time
        H=beta.shape[2], HK=HK, K=K, C=layout.C, BK=BK, PREC="ieee",
        num_warps=4 if layout.C * BK <= 512 else 8,  # fewer register spills on an H100 (ptxas -v)
    )


class _DeltaPrep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, G: Tensor, beta: Tensor, layout: ChunkLayout):
        q, k, G, beta = (x.contiguous() for x in (q, k, G, beta))
        B, T, _, K = q.shape
        H, C, N = beta.shape[2], layout.C, layout.N
        A = alloc(B, H, N, C, C, like=q)
        R = alloc(B, T, H, K, like=q)
        Kd = alloc(B, T, H, K, like=q)
        P = alloc(B, H, N, K, K, like=q)
        _delta_prep_fwd_kernel[(N, B * H)](
            q, k, G, beta, layout.shift, A, R, Kd, P, T, N, **_meta(q, beta, layout)
        )
        ctx.save_for_backward(q, k, G, beta)
        ctx.layout = layout
        ctx.set_materialize_grads(False)
        return A, R, Kd, P

    @staticmethod
    @once_differentiable
    def backward(ctx, dA: Tensor | None, dR: Tensor | None, dKd: Tensor | None, dP: Tensor | None):
        q, k, G, beta = ctx.saved_tensors
        layout = ctx.layout
        B, T, _, K = q.shape
        H, C, N = beta.shape[2], layout.C, layout.N
        dq = alloc(B, T, H, K, like=q)
        dk = alloc(B, T, H, K, like=q)
        dG = alloc(B, H, N * C, like=q)
        dbeta = alloc(B, T, H, like=q)
        scratch = alloc(B, H, N, C * max(C, _meta(q, beta, layout)["BK"]), like=q)
        grads = [None if d is None else d.float().contiguous() for d in (dA, dR, dKd, dP)]
        dA, dR, dKd, dP = (q if d is None else d for d in grads)  # q stands in for absent gradients (never read)
        _delta_prep_bwd_kernel[(N, B * H)](
            q, k, G, beta, layout.shift, dA, dR, dKd, dP, dq, dk, dG, dbeta, scratch, T, N,
            HAS_DA=grads[0] is not None, HAS_DR=grads[1] is not None,
            HAS_DKD=grads[2] is not None, HAS_DP=grads[3] is not None,
            **_meta(q, beta, layout),
        )
        return sum_head_groups(dq, q), sum_head_groups(dk, k), dG, dbeta.to(beta.dtype), None


def delta_prep(
    q: Tensor, k: Tensor, G: Tensor, beta: Tensor, layout: ChunkLayout
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The delta rule's per-chunk quantities (module docstring), differentiable in q, k, G and beta.

    q, k (B, T, Hk, K) in float32/bfloat16/float16 (GQA: v-head h reads head h // (H // Hk)),
    G (B, H, N*C) float32 (ChunkLayout.chunk_cumsum of the log decays), beta (B, T, H) in (0, 2).
    Returns A (B, H, N, C, C), R (B, T, H, K), Kd (B, T, H, K), P (B, H, N, K, K), all float32.
    """
    _check(q, k, G, beta, layout)
    return _DeltaPrep.apply(q, k, G, beta, layout)

"""Inter-chunk Triton kernels: the chunk-level Fenwick pass, forward and backward, all levels in one program.

Per (batch, head, block of V rows) one program walks the chunks of its sequence in order (reverse in
the backward) and keeps the chunk-level Fenwick buckets S_m (BV x K each; bucket m holds the keys
at level c + m) in a small scratch area that stays in cache. At absolute chunk I (i-th chunk):

1. merge (lam given, I > 0, z = trailing zeros of I):  S_{z+1} <- S_0 + ... + S_{z+1};  S_0..S_z <- 0
2. read every non-empty bucket, i.e. m >= 1 with bit m-1 of I set (lam None: the single bucket 0):
   o_t += lambda_t^(c+m) R_t S_m^T
3. move it through the chunk:  S_m <- a S_m (scalar decay) or S_m P (delta rule, P = K x K)
4. the chunk's keys enter:  S_0 <- S_0 + V^T Kd
R (effective queries), Kd (effective keys) and a or P come from the variant's preparation. At the
sequence's last chunk the final state is written instead of step 4: bucket m at level c + m, and
the chunk's own keys split into levels bit_length(last ^ s) <= c. Only the buckets a chunk reads
are touched, so a chunk costs O(popcount(I)) state updates, and all levels share one pass.
The backward walks back with the adjoint buckets dS_m, reading the forward's bucket snapshots.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from loglinear.kernels.fused.common import (
    alloc,
    level_of,
    num_warps,
    pow2,
    slot_rows,
    token_tile,
)
from loglinear.kernels.layout import ChunkLayout


@triton.jit
def _trailing_zeros(I, NB):
    """Trailing zero bits of I > 0, counted up to NB (int32, usable as a loop bound)."""
    z = (I * 0).to(tl.int32)
    for j in range(0, NB):
        z = tl.where((((I >> j) & 1) == 0) & (z == j), j + 1, z)
    return z


@triton.jit
def _is_read(I, m, HAS_LAM: tl.constexpr):
    """Whether chunk I reads bucket m: bit m-1 of I (lam given), always bucket 0 (lam None)."""
    if HAS_LAM:
        return (m >= 1) & (((I >> tl.maximum(m - 1, 0)) & 1) == 1)
    else:
        return m == 0


@triton.jit
def _bucket_tile(pv, V, K, BK: tl.constexpr, BV: tl.constexpr):
    """Rows vv (BV,) of V block pv, columns kk (BK,), and the offsets and mask of that tile inside one V x K state."""
    vv = pv * BV + tl.arange(0, BV)
    kk = tl.arange(0, BK)
    return vv, kk, vv[:, None] * K + kk[None, :], (vv < V)[:, None] & (kk < K)[None, :]


@triton.jit
def scan_fwd_kernel(
    R_ptr, Kd_ptr, tr_ptr, v_ptr, lam_ptr, o_ptr, F_ptr, S_ptr, Hs_ptr, slot_ptr,
    shift_ptr, first_ptr, nchunk_ptr,
    T, H, N, K, V, L, LC, NS, NL,
    C: tl.constexpr, LOG_C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_LAM: tl.constexpr, MATRIX: tl.constexpr, SAVE: tl.constexpr, PREC: tl.constexpr,
):
    """Adds the inter-chunk term to o (B, T, H, V); writes the final state F (B, H, L, V, K) of these tokens.

    S (B, H, LC, V, K) is zeroed scratch for the buckets; with SAVE, each bucket a chunk reads is
    also stored (before its move) into Hs (B, H, NS, V, K) at slot[b, i, m] for the backward.
    """
    pv, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    vv, kk, vk, vk_mask = _bucket_tile(pv, V, K, BK, BV)  # vk: (BV, BK) offsets inside one V x K state
    r = tl.arange(0, C)
    S_base = S_ptr + bh * LC * V * K
    first = tl.load(first_ptr + b)
    nb = tl.load(nchunk_ptr + b)
    for i in range(0, nb):
        I = first + i
        t, valid = slot_rows(b, i, shift_ptr, T, C)
        if HAS_LAM:  # 1. merge
            if I > 0:
                z = _trailing_zeros(I, LC)
                acc = tl.zeros((BV, BK), dtype=tl.float32)
                for l in range(0, z + 2):
                    acc += tl.load(S_base + l * V * K + vk, mask=vk_mask, other=0.0)
                    tl.store(S_base + l * V * K + vk, tl.zeros((BV, BK), dtype=tl.float32), mask=vk_mask)
                tl.debug_barrier()
                tl.store(S_base + (z + 1) * V * K + vk, acc, mask=vk_mask)
                tl.debug_barrier()
        tok_k, ck_mask = token_tile(b, h, t, valid, kk, T, H, K)
        Rq = tl.load(R_ptr + tok_k, mask=ck_mask, other=0.0)  # (C, BK)
        Kd = tl.load(Kd_ptr + tok_k, mask=ck_mask, other=0.0)  # (C, BK)
        tok_v, cv_mask = token_tile(b, h, t, valid, vv, T, H, V)
        vb = tl.load(v_ptr + tok_v, mask=cv_mask, other=0.0).to(tl.float32)  # (C, BV)
        if MATRIX:
            P = tl.load(tr_ptr + (bh * N + i).to(tl.int64) * K * K + kk[:, None] * K + kk[None, :],
                        mask=(kk < K)[:, None] & (kk < K)[None, :], other=0.0)  # (BK, BK)
        else:
            a = tl.load(tr_ptr + bh * N + i)
        o_acc = tl.zeros((C, BV), dtype=tl.float32)
        for m in range(0, LC):  # 2. read and 3. move the non-empty buckets
            if _is_read(I, m, HAS_LAM):
                S = tl.load(S_base + m * V * K + vk, mask=vk_mask, other=0.0)  # (BV, BK)
                if SAVE:
                    slot = tl.load(slot_ptr + (b * N + i) * LC + m)
                    tl.store(Hs_ptr + (bh * NS + slot).to(tl.int64) * V * K + vk, S, mask=vk_mask)
                Rw = Rq
                if HAS_LAM:
                    w = tl.load(lam_ptr + ((b * T + t).to(tl.int64) * H + h) * L + LOG_C + m, mask=valid, other=0.0)
                    Rw = Rq * w.to(tl.float32)[:, None]
                o_acc += tl.dot(Rw, tl.trans(S), input_precision=PREC)
                if MATRIX:
                    S = tl.dot(S, P, input_precision=PREC)
                else:
                    S = S * a
                tl.store(S_base + m * V * K + vk, S, mask=vk_mask)
        tl.debug_barrier()
        o_old = tl.load(o_ptr + tok_v, mask=cv_mask, other=0.0)
        tl.store(o_ptr + tok_v, o_old + o_acc, mask=cv_mask)
        F_base = F_ptr + bh * L * V * K
        if i < nb - 1:  # 4. the chunk's keys enter bucket 0
            D = tl.dot(tl.trans(vb), Kd, input_precision=PREC)  # (BV, BK)
            if not HAS_LAM:
                D += tl.load(S_base + vk, mask=vk_mask, other=0.0)
            tl.store(S_base + vk, D, mask=vk_mask)
            tl.debug_barrier()
        else:  # the final state: the chunk's keys by level bit_length(last ^ s), then the buckets above
            last = T - 1 + tl.load(shift_ptr + b) - i * C  # slot of the last token
            lev = tl.minimum(level_of(r ^ last), L - 1)  # (C,)
            for l in range(0, NL):
                vl = tl.where((lev == l)[:, None], vb, 0.0)
                Fl = tl.dot(tl.trans(vl), Kd, input_precision=PREC)  # (BV, BK)
                if not HAS_LAM:
                    Fl += tl.load(S_base + vk, mask=vk_mask, other=0.0)
                tl.store(F_base + l * V * K + vk, Fl, mask=vk_mask)
            if HAS_LAM:
                for m in range(1, LC):
                    bucket = tl.load(S_base + m * V * K + vk, mask=vk_mask, other=0.0)
                    tl.store(F_base + (LOG_C + m) * V * K + vk, bucket, mask=vk_mask)


@triton.jit
def scan_bwd_kernel(
    R_ptr, Kd_ptr, tr_ptr, v_ptr, lam_ptr, do_ptr, dF_ptr, dS_ptr, Hs_ptr, slot_ptr,
    shift_ptr, first_ptr, nchunk_ptr,
    dR_ptr, dKd_ptr, dtr_ptr, dv_ptr, dlam_ptr,
    T, H, N, K, V, L, LC, NS, NL,
    C: tl.constexpr, LOG_C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_LAM: tl.constexpr, MATRIX: tl.constexpr, PREC: tl.constexpr,
):
    """The reverse pass of scan_fwd_kernel with adjoint buckets dS (B, H, LC, V, K) (zeroed scratch).

    Per block of V rows (program_id(0) = pv) it writes partial sums dR, dKd (NV, B, T, H, K), the
    transition's gradient dtr (NV, B, H, N[, K, K]) and dlam (NV, B, T, H, LC) (bucket m <-> level
    c + m); it adds its share of dv into dv (B, T, H, V).
    """
    pv, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    vv, kk, vk, vk_mask = _bucket_tile(pv, V, K, BK, BV)  # vk: (BV, BK) offsets inside one V x K state
    r = tl.arange(0, C)
    dS_base = dS_ptr + bh * LC * V * K
    dF_base = dF_ptr + bh * L * V * K
    B = tl.num_programs(1) // H
    first = tl.load(first_ptr + b)
    nb = tl.load(nchunk_ptr + b)
    for ii in range(0, nb):
        i = nb - 1 - ii
        I = first + i
        t, valid = slot_rows(b, i, shift_ptr, T, C)
        tok_k, ck_mask = token_tile(b, h, t, valid, kk, T, H, K)
        Rq = tl.load(R_ptr + tok_k, mask=ck_mask, other=0.0)  # (C, BK)
        Kd = tl.load(Kd_ptr + tok_k, mask=ck_mask, other=0.0)  # (C, BK)
        tok_v, cv_mask = token_tile(b, h, t, valid, vv, T, H, V)
        vb = tl.load(v_ptr + tok_v, mask=cv_mask, other=0.0).to(tl.float32)  # (C, BV)
        do = tl.load(do_ptr + tok_v, mask=cv_mask, other=0.0)  # (C, BV)
        # 4'. the keys' entry: from bucket 0, or at the last chunk from the final state's levels
        if i < nb - 1:
            dD = tl.load(dS_base + vk, mask=vk_mask, other=0.0)  # (BV, BK)
            dv_acc = tl.dot(Kd, tl.trans(dD), input_precision=PREC)  # (C, BV)
            dKd_acc = tl.dot(vb, dD, input_precision=PREC)  # (C, BK)
        else:
            last = T - 1 + tl.load(shift_ptr + b) - i * C
            lev = tl.minimum(level_of(r ^ last), L - 1)
            dv_acc = tl.zeros((C, BV), dtype=tl.float32)
            dKd_acc = tl.zeros((C, BK), dtype=tl.float32)
            for l in range(0, NL):
                dFl = tl.load(dF_base + l * V * K + vk, mask=vk_mask, other=0.0)  # (BV, BK)
                rows = (lev == l)[:, None]
                dv_acc += tl.where(rows, tl.dot(Kd, tl.trans(dFl), input_precision=PREC), 0.0)
                dKd_acc += tl.where(rows, tl.dot(vb, dFl, input_precision=PREC), 0.0)
            if HAS_LAM:
                for m in range(1, LC):
                    dbucket = tl.load(dF_base + (LOG_C + m) * V * K + vk, mask=vk_mask, other=0.0)
                    tl.store(dS_base + m * V * K + vk, dbucket, mask=vk_mask)
            else:
                tl.store(dS_base + vk, tl.load(dF_base + vk, mask=vk_mask, other=0.0), mask=vk_mask)
            tl.debug_barrier()
        if MATRIX:
            P = tl.load(tr_ptr + (bh * N + i).to(tl.int64) * K * K + kk[:, None] * K + kk[None, :],
                        mask=(kk < K)[:, None] & (kk < K)[None, :], other=0.0)  # (BK, BK)
            dtr = tl.zeros((BK, BK), dtype=tl.float32)
        else:
            a = tl.load(tr_ptr + bh * N + i)
            dtr = tl.sum(tl.zeros((BV,), dtype=tl.float32), axis=0)
        dR_acc = tl.zeros((C, BK), dtype=tl.float32)
        # 3'. and 2'. back through the move and the read of each bucket the chunk read
        for m in range(0, LC):
            if _is_read(I, m, HAS_LAM):
                slot = tl.load(slot_ptr + (b * N + i) * LC + m)
                # (BV, BK) before the move
                S = tl.load(Hs_ptr + (bh * NS + slot).to(tl.int64) * V * K + vk, mask=vk_mask, other=0.0)
                dS = tl.load(dS_base + m * V * K + vk, mask=vk_mask, other=0.0)  # adjoint after the move
                if MATRIX:
                    dtr += tl.dot(tl.trans(S), dS, input_precision=PREC)
                    dS = tl.dot(dS, tl.trans(P), input_precision=PREC)
                else:
                    dtr += tl.sum(tl.sum(dS * S, axis=1), axis=0)
                    dS = dS * a
                dRS = tl.dot(do, S, input_precision=PREC)  # (C, BK)
                if HAS_LAM:
                    lam_off = ((b * T + t).to(tl.int64) * H + h) * L + LOG_C + m
                    w = tl.load(lam_ptr + lam_off, mask=valid, other=0.0).to(tl.float32)
                    dS += tl.dot(tl.trans(do), Rq * w[:, None], input_precision=PREC)
                    dR_acc += dRS * w[:, None]
                    dl = tl.sum(dRS * Rq, axis=1)  # (C,)
                    tl.store(dlam_ptr + (((pv * B + b) * T + t).to(tl.int64) * H + h) * LC + m, dl, mask=valid)
                else:
                    dS += tl.dot(tl.trans(do), Rq, input_precision=PREC)
                    dR_acc += dRS
                tl.store(dS_base + m * V * K + vk, dS, mask=vk_mask)
            elif HAS_LAM:
                dlam_off = (((pv * B + b) * T + t).to(tl.int64) * H + h) * LC + m
                tl.store(dlam_ptr + dlam_off, tl.zeros((C,), dtype=tl.float32), mask=valid)
        tl.debug_barrier()
        # 1'. back through the merge: every merged bucket receives the merged bucket's adjoint
        if HAS_LAM:
            if I > 0:
                z = _trailing_zeros(I, LC)
                X = tl.load(dS_base + (z + 1) * V * K + vk, mask=vk_mask, other=0.0)
                for l in range(0, z + 1):
                    tl.store(dS_base + l * V * K + vk, X, mask=vk_mask)
                tl.debug_barrier()
        part_k, _ = token_tile(pv * B + b, h, t, valid, kk, T, H, K)  # row b of the partial sums of V block pv
        tl.store(dR_ptr + part_k, dR_acc, mask=ck_mask)
        tl.store(dKd_ptr + part_k, dKd_acc, mask=ck_mask)
        dv_old = tl.load(dv_ptr + tok_v, mask=cv_mask, other=0.0)
        tl.store(dv_ptr + tok_v, dv_old + dv_acc, mask=cv_mask)
        if MATRIX:
            tl.store(dtr_ptr + ((pv * B * H + bh) * N + i).to(tl.int64) * K * K + kk[:, None] * K + kk[None, :], dtr,
                     mask=(kk < K)[:, None] & (kk < K)[None, :])
        else:
            tl.store(dtr_ptr + (pv * B * H + bh) * N + i, dtr)


def _bv(K: int, V: int) -> int:
    """Rows of V per program: one bucket tile (BV x pow2(K)) stays within 4K float32 elements."""
    return max(16, min(pow2(V), 4096 // pow2(K)))


def read_slots(layout: ChunkLayout, LC: int, has_lam: bool) -> tuple[Tensor, int]:
    """Snapshot slot of every (sequence, chunk, bucket) the forward reads (B, N, LC) int32 (-1: none), and the count."""
    dev = layout.shift.device
    i = torch.arange(layout.N, device=dev)
    I = layout.first[:, None] + i[None, :]  # (B, N) absolute chunk indices
    m = torch.arange(LC, device=dev)
    if has_lam:
        read = (m >= 1) & (((I[:, :, None] >> (m - 1).clamp_min(0)) & 1) == 1)
    else:
        read = (m == 0).expand(I.shape + (LC,))
    read = read & (i[None, :, None] < layout.n_chunks[:, None, None])
    slots = read.flatten(1).cumsum(1).reshape(read.shape) - 1
    count = max(1, int(read.flatten(1).sum(1).max()))
    return torch.where(read, slots, -1).to(torch.int32), count


def scan_forward(R: Tensor, Kd: Tensor, trans: Tensor, v: Tensor, lam: Tensor | None, o: Tensor,
                 L: int, layout: ChunkLayout, prec: str, save: bool):
    """Adds the inter-chunk term to o in place; returns the final state (B, H, L, V, K) and the snapshots."""
    B, T, H, V = v.shape
    K = R.shape[-1]
    LC = max(1, L - layout.c) if lam is not None else 1
    BV = _bv(K, V)
    slots, NS = read_slots(layout, LC, lam is not None)
    S = torch.zeros(B, H, LC, V, K, dtype=torch.float32, device=v.device)
    Hs = alloc(B, H, NS, V, K, like=v) if save else S
    F = alloc(B, H, L, V, K, like=v)
    scan_fwd_kernel[(triton.cdiv(V, BV), B * H)](
        R, Kd, trans, v, lam, o, F, S, Hs, slots, layout.shift, layout.first, layout.n_chunks,
        T, H, layout.N, K, V, L, LC, NS, min(layout.c + 1, L),
        C=layout.C, LOG_C=layout.c, BK=pow2(K), BV=BV, HAS_LAM=lam is not None, MATRIX=trans.dim() == 5,
        SAVE=save, PREC=prec, num_warps=num_warps(layout.C * pow2(K), BV * pow2(K)),
    )
    return F, (Hs, slots, NS)


def scan_backward(R, Kd, trans, v, lam, do, dF, saved, dv: Tensor, L: int, layout: ChunkLayout, prec: str):
    """Gradients (dR, dKd, dtrans, dlam of levels c+1.., summed over V blocks); adds into dv in place."""
    B, T, H, V = v.shape
    K = R.shape[-1]
    LC = max(1, L - layout.c) if lam is not None else 1
    BV = _bv(K, V)
    NV = triton.cdiv(V, BV)
    Hs, slots, NS = saved
    dS = torch.zeros(B, H, LC, V, K, dtype=torch.float32, device=v.device)
    dR, dKd = alloc(NV, B, T, H, K, like=v), alloc(NV, B, T, H, K, like=v)
    dtr = torch.zeros((NV,) + tuple(trans.shape), dtype=torch.float32, device=v.device)  # padding chunks stay 0
    dlam = alloc(NV, B, T, H, LC, like=v) if lam is not None else None
    scan_bwd_kernel[(NV, B * H)](
        R, Kd, trans, v, lam, do, dF, dS, Hs, slots, layout.shift, layout.first, layout.n_chunks,
        dR, dKd, dtr, dv, dlam, T, H, layout.N, K, V, L, LC, NS, min(layout.c + 1, L),
        C=layout.C, LOG_C=layout.c, BK=pow2(K), BV=BV, HAS_LAM=lam is not None, MATRIX=trans.dim() == 5,
        PREC=prec, num_warps=num_warps(layout.C * pow2(K), BV * pow2(K)),
    )
    dlam = None if dlam is None else dlam.sum(0)[..., 1:]  # bucket m >= 1 <-> level c + m
    return dR.sum(0), dKd.sum(0), dtr.sum(0), dlam

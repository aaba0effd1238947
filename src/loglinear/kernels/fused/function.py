"""The `impl="triton"` path: the variant's preparation, the fused core (an autograd Function) and the initial state.

1. Preparation per chunk (kernels/chunk.py steps 1-2): G = in-chunk cumulative log decay; the
   effective queries R, keys Kd and transition (a scalar `a` for Mamba-2, a K x K matrix P for the
   delta rule); the delta rule also gets its C x C intra matrix A from the `delta_prep` kernels.
   For Mamba-2, R = exp(G) q, Kd = exp(G_end - G) k and a = exp(G_end) are elementwise torch ops
   and the intra-chunk scores are formed inside the intra kernel.
2. Core (`_FusedCore`): intra-chunk kernel + one inter-chunk Fenwick pass, forward and backward in
   Triton. It covers the call's own tokens and writes their part of the final state.
3. An initial state's buckets (chunked prefill, continuing a state) are read with torch ops:
   bucket l at level max(l, bit_length(p_t ^ last)), moved through the chunks' transitions by a
   prefix product. Autograd differentiates them, the initial state included.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from loglinear.kernels.fenwick import state_bucket_levels
from loglinear.kernels.fused.common import dot_precision
from loglinear.kernels.fused.delta_prep import delta_prep
from loglinear.kernels.fused.intra import intra_backward, intra_forward
from loglinear.kernels.fused.scan import scan_backward, scan_forward
from loglinear.kernels.layout import ChunkLayout, expand_heads, sum_head_groups
from loglinear.kernels.level_gather import gather_levels
from loglinear.kernels.state import LogLinearState
from loglinear.kernels.triton_limits import MAX_CHUNK
from loglinear.kernels.variant import Variant

MIN_CHUNK = 16  # tl.dot needs blocks of at least 16


class _FusedCore(torch.autograd.Function):
    """o (B, T, H, V) float32 and the final state (B, H, L, V, K) of the call's tokens from a zero state.

    qk mode (Mamba-2): q, k, G given and A None; A mode (delta rule): A given, q, k, G None.
    """

    @staticmethod
    def forward(ctx, q, k, G, A, R, Kd, trans, v, lam, layout: ChunkLayout, L: int, prec: str):
        o = intra_forward(q, k, G, A, v, lam, layout, prec)
        final, saved = scan_forward(R, Kd, trans, v, lam, o, L, layout, prec, save=any(ctx.needs_input_grad))
        Hs, slots, NS = saved
        ctx.save_for_backward(q, k, G, A, R, Kd, trans, v, lam, Hs, slots)
        ctx.layout, ctx.L, ctx.NS, ctx.prec = layout, L, NS, prec
        return o, final

    @staticmethod
    def backward(ctx, do, dfinal):
        q, k, G, A, R, Kd, trans, v, lam, Hs, slots = ctx.saved_tensors
        layout, L = ctx.layout, ctx.L
        do = do.contiguous()
        if dfinal is None:
            dfinal = torch.zeros(v.shape[0], v.shape[2], L, v.shape[3], R.shape[-1], device=v.device)
        else:
            dfinal = dfinal.contiguous()
        through_A, dv, dlam_intra = intra_backward(q, k, G, A, v, lam, do, layout, ctx.prec)
        dR, dKd, dtrans, dlam_inter = scan_backward(
            R, Kd, trans, v, lam, do, dfinal, (Hs, slots, ctx.NS), dv, L, layout, ctx.prec
        )
        dq = dk = dG = dA = dlam = None
        if A is None:
            dq, dk, dG = through_A
            dq, dk = sum_head_groups(dq, q), sum_head_groups(dk, k)
        else:
            dA = through_A
        if lam is not None:
            dlam = (dlam_intra if dlam_inter.shape[-1] == 0 else torch.cat([dlam_intra, dlam_inter], -1)).to(lam.dtype)
        return dq, dk, dG, dA, dR, dKd, dtrans, dv.to(v.dtype), dlam, None, None, None


def fused_log_linear_attn(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None, variant: Variant,
    state: LogLinearState | None, out_levels: int, chunk_size: int,
) -> tuple[Tensor, LogLinearState]:
    """The operator on the fused kernels: inputs (B, T, H|HK, *), lam with `out_levels` levels or None;
    `beta` (B, T, H) is read for the delta rule only (K <= MAX_K, checked at the operator's entry)."""
    delta = variant is Variant.DELTA_RULE
    B, T, H, V = v.shape
    dev = v.device
    # chunks are at most MAX_CHUNK long (larger blocks do not fit a block's shared memory): a smaller chunk
    # changes nothing but rounding
    chunk_size = min(chunk_size, MAX_CHUNK)
    C = max(MIN_CHUNK, min(chunk_size, 1 << (T - 1).bit_length()))
    p0 = torch.zeros(B, dtype=torch.int64, device=dev) if state is None else state.position
    layout = ChunkLayout.at_start(B, T, C, dev) if state is None else ChunkLayout.build(p0, T, C)
    # The kernels read float32 whatever the caller's dtype: with bfloat16 inputs, an H100 with Triton 3.6 gave
    # an o that was wrong and changed between identical calls where lam and an initial state were given, and the
    # delta rule's preparation read out of bounds of shared memory; from float32 copies both were right and
    # repeatable. The dots keep the precision of the caller's dtype (tf32 for half precision), except the delta
    # rule's preparation, which runs exact dots (its tf32 form was the out-of-bounds read).
    prec = dot_precision(v.dtype)
    q, k, v = q.float().contiguous(), k.float().contiguous(), v.float().contiguous()
    lam = None if lam is None else lam.float().contiguous()
    beta = None if beta is None else beta.float()

    # 1. preparation
    G = layout.chunk_cumsum(g)  # (B, H, N*C)
    G_end = G.reshape(B, H, layout.N, C)[..., -1]  # (B, H, N)
    if not delta:
        G_tok = layout.from_chunks(G)  # (B, T, H)
        # each slot's chunk end, read through an expand: a gather's backward would add with atomics on CUDA
        G_end_tok = layout.from_chunks(G_end[..., None].expand(-1, -1, -1, C).reshape(B, H, -1))  # (B, T, H)
        R = (G_tok.exp()[..., None] * expand_heads(q, H).float()).contiguous()  # (B, T, H, K)
        Kd = ((G_end_tok - G_tok).exp()[..., None] * expand_heads(k, H).float()).contiguous()  # (B, T, H, K)
        trans = G_end.exp().contiguous()  # (B, H, N)
        core_in = (q, k, G.contiguous(), None)
    else:
        A, R, Kd, trans = delta_prep(q, k, G.contiguous(), beta.contiguous(), layout)
        core_in = (None, None, None, A)

    # 2. the fused core
    L = out_levels
    o, final = _FusedCore.apply(*core_in, R, Kd, trans, v, lam, layout, L, prec)  # delta rule: A given, q, k, G None

    # 3. the initial state
    if state is not None:
        o_init, final_init = _initial_state_terms(state, R, trans if delta else G_end, variant, lam, layout, L)
        o, final = o + o_init, final + final_init
    return o, LogLinearState(final, p0 + T)


def _initial_state_terms(
    state: LogLinearState, R: Tensor, trans: Tensor, variant: Variant, lam: Tensor | None, layout: ChunkLayout,
    L: int,
):
    """What an initial state adds: to o (B, T, H, V), and to the final state (B, H, L, V, K).

    trans: the chunks' log decays G_end (B, H, N) (Mamba-2) or transitions P (B, H, N, K, K) (delta rule).
    """
    E = state.levels  # (B, H, L0, V, K)
    B, H, L0, V, K = E.shape
    N, C = layout.N, layout.C
    # prefix products of the chunk transitions: M_i moves a state from the sequence start to chunk i's start
    if variant is Variant.SCALAR_DECAY:
        before = (trans.cumsum(-1) - trans).exp()  # (B, H, N) decay up to each chunk's start
        total = trans.sum(-1).exp()[:, :, None, None, None]  # (B, H, 1, 1, 1)
        Rm = layout.to_chunks(R).reshape(B, H, N, C, K) * before[..., None, None]  # (B, H, N, C, K)
        moved = E * total
    else:
        incl = trans
        step = 1
        while step < N:  # Hillis-Steele scan: incl[i] = P_0 ... P_i
            incl = torch.cat([incl[:, :, :step], incl[:, :, :-step] @ incl[:, :, step:]], dim=2)
            step *= 2
        eye = torch.eye(K, dtype=trans.dtype, device=trans.device).expand(B, H, 1, K, K)
        before = torch.cat([eye, incl[:, :, :-1]], dim=2)  # (B, H, N, K, K)
        Rm = layout.to_chunks(R).reshape(B, H, N, C, K) @ before.transpose(-1, -2)  # r_t M_i^T
        moved = E @ incl[:, :, -1:]
    # bucket l is read at level max(l, bit_length(p_t ^ last)); the final state takes it at that level too
    t, _ = layout.slot_tokens()
    pos = layout.first[:, None] * C + t + layout.shift[:, None].long()  # (B, N*C) absolute slot positions
    if lam is None:
        W0 = Rm.new_ones(B, H, N, C, L0)
        into = torch.zeros(B, L0, dtype=torch.int64, device=E.device)
    else:
        lev = state_bucket_levels(state.last_position, pos, L0).clamp(max=L - 1)  # (B, N*C, L0)
        W0 = gather_levels(layout.to_chunks(lam).float(), lev[:, None].expand(B, H, -1, -1)).reshape(B, H, N, C, L0)
        into = state_bucket_levels(state.last_position, (state.position + layout.T - 1)[:, None], L0)[:, 0]
    RW = (W0[..., None] * Rm[..., None, :]).reshape(B, H, N * C, L0 * K)
    o = (RW @ E.reshape(B, H, L0, V, K).transpose(-1, -2).reshape(B, H, L0 * K, V))  # (B, H, N*C, V)
    idx = torch.arange(layout.T, device=E.device)[None, :] + layout.shift[:, None].long()  # (B, T)
    o = o.gather(2, idx[:, None, :, None].expand(-1, H, -1, V)).transpose(1, 2)  # (B, T, H, V)
    final = torch.einsum("bjl,bhjvk->bhlvk", F.one_hot(into, L).to(E.dtype), moved)
    return o, final

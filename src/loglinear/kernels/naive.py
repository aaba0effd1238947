"""Naive log-linear attention: the paper's parallel form, O = (A ⊙ M^H) V, dense in T (O(T^2)).

Written to be read next to the paper (section 3, "Log-Linear Attention"). Per batch element and
head, with absolute positions p_t and the cumulative log-decay G_t = sum_{i<=t} g_i:

    M^S_ts = exp(G_t - G_s) for s <= t                (the semiseparable decay mask)
    A      = Q K^T ⊙ M^S                               (log-linear Mamba-2, beta None)
    A      = (Q K^T ⊙ M^S) (I + L)^-1 diag(beta)       (log-linear Gated DeltaNet; L_ts = beta_t k_t.k_s M^S_ts, s < t)
    M^H_ts = lambda_t^(ell(p_t, p_s)),  ell(t, s) = bit_length(t XOR s)   (the hierarchical mask)
    O      = (A ⊙ M^H) V

A_ts is the coefficient beta_s k_s^T W_{s+1}...W_t q_t of v_s in o_t (docs/operator.md);
for the delta rule it comes from the UT/WY form of the gated delta rule. An initial state adds
sum_l lambda_t^(level of bucket l) S0^(l) r_t with r_t = W_0...W_t q_t.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor

from loglinear.kernels.fenwick import bit_length, level_matrix, state_bucket_levels
from loglinear.kernels.state import LogLinearState
from loglinear.kernels.variant import Variant


def naive_log_linear_attn(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None, variant: Variant,
    state: LogLinearState, out_levels: int,
) -> tuple[Tensor, LogLinearState]:
    """Inputs (B, T, H, *) in the compute dtype, `state` the initial state; returns o (B, T, H, V), final state.

    `variant` says which transition applies; `beta` (B, T, H) is read for the delta rule only."""
    delta = variant is Variant.DELTA_RULE
    B, T, H, K = q.shape
    Q, Kt, Vt = (rearrange(x, "b t h d -> b h t d") for x in (q, k, v))  # (B, H, T, K|K|V)
    S0 = state.levels  # (B, H, L0, V, K)
    eye = torch.eye(T, dtype=q.dtype, device=q.device)  # (T, T)

    # 1. absolute positions and cumulative log-decays
    p = state.position[:, None] + torch.arange(T, device=q.device)  # (B, T)
    G = rearrange(g, "b t h -> b h t").cumsum(-1)  # (B, H, T)

    # 2. semiseparable mask M^S_ts = exp(G_t - G_s) for s <= t (masked before exp: no exp of a positive number)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # (T, T)
    MS = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # (B, H, T, T)

    # 3. the linear-attention matrix A (Mamba-2: QK^T ⊙ M^S; delta rule: times (I + L)^-1 diag(beta))
    A = (Q @ Kt.transpose(-1, -2)) * MS  # (B, H, T, T)
    if delta:
        b = rearrange(beta, "b t h -> b h t")  # (B, H, T)
        L = (b[..., :, None] * (Kt @ Kt.transpose(-1, -2)) * MS).tril(-1)  # (B, H, T, T)
        T_beta = torch.linalg.solve_triangular(eye + L, torch.diag_embed(b), upper=False, unitriangular=True)
        A = A @ T_beta  # (B, H, T, T)

    # 4. hierarchical mask M^H_ts = lambda_t^(ell(p_t, p_s)) and the output O = (A ⊙ M^H) V
    if lam is None:
        O = A @ Vt  # (B, H, T, V)
    else:
        lam_t = rearrange(lam, "b t h l -> b h t l")  # (B, H, T, L)
        ell = level_matrix(p, p).clamp(max=lam.shape[-1] - 1)  # (B, T, T); clamped entries lie above the diagonal
        MH = lam_t.gather(-1, ell[:, None].expand(B, H, T, T))  # (B, H, T, T)
        O = (A * MH) @ Vt  # (B, H, T, V)

    # 5. initial state: o_t += sum_l lambda_t^(level of bucket l) S0^(l) r_t, r_t = W_0..W_t q_t
    eG = G.exp()[..., None]  # (B, H, T, 1)
    R = eG * Q - A @ (eG * Kt) if delta else eG * Q  # (B, H, T, K)
    Y = torch.einsum("bhtk,bhlvk->bhtlv", R, S0)  # (B, H, T, L0, V)
    if lam is None:
        O = O + Y.sum(3)
    else:
        bucket_level = state_bucket_levels(state.last_position, p, S0.shape[2])  # (B, T, L0)
        w = lam_t.gather(-1, bucket_level[:, None].expand(B, H, T, -1).clamp(max=lam.shape[-1] - 1))  # (B, H, T, L0)
        O = O + torch.einsum("bhtl,bhtlv->bhtv", w, Y)

    # 6. final state: key s lands in level ell(p_last, p_s) with k_s^T replaced by c_s^T = beta_s k_s^T W_{s+1}..W_last
    last = p[:, -1]  # (B,)
    gamma = (G[..., -1:] - G).exp()[..., None]  # (B, H, T, 1) decay from s to the last position
    C = T_beta.transpose(-1, -2) @ (gamma * Kt) if delta else gamma * Kt  # (B, H, T, K)
    if lam is None:
        key_level = torch.zeros(B, T, dtype=torch.int64, device=q.device)
        bucket_to = torch.zeros(B, S0.shape[2], dtype=torch.int64, device=q.device)
    else:
        key_level = bit_length(last[:, None] ^ p)  # (B, T)
        bucket_to = state_bucket_levels(state.last_position, last[:, None], S0.shape[2])[:, 0]  # (B, L0)
    onehot = torch.nn.functional.one_hot(key_level, out_levels).to(q.dtype)  # (B, T, Lout)
    S_keys = torch.einsum("btl,bhtv,bhtk->bhlvk", onehot, Vt, C)  # (B, H, Lout, V, K)
    # the initial buckets travel through W_0..W_last: P = exp(G_last) I - (exp(G) K)^T C
    eG_last = G[..., -1].exp()[..., None, None]  # (B, H, 1, 1)
    if not delta:
        S0_moved = eG_last[:, :, None] * S0
    else:
        P = eG_last * torch.eye(K, dtype=q.dtype, device=q.device) - (eG * Kt).transpose(-1, -2) @ C  # (B, H, K, K)
        S0_moved = S0 @ P[:, :, None]  # (B, H, L0, V, K)
    move = torch.nn.functional.one_hot(bucket_to, out_levels).to(q.dtype)  # (B, L0, Lout)
    S_final = S_keys + torch.einsum("bjl,bhjvk->bhlvk", move, S0_moved)
    return rearrange(O, "b h t v -> b t h v"), LogLinearState(S_final, state.position + T)

"""Recurrent log-linear attention: the Fenwick level-state loop (O(log T) state, the decoding form).

Per batch element and head, with level states S^(0..L-1) (each V x K) and absolute position p,
one token does (docs/operator.md):

    1. S^(l) <- S^(l) W_t for every level,   W_t = alpha_t (I - beta_t k_t k_t^T)  (beta None: alpha_t I)
    2. if p > 0 (z = trailing zeros of p):   S^(z+1) <- S^(0) + ... + S^(z+1);  S^(0..z) <- 0
    3. S^(0) <- S^(0) + beta_t v_t k_t^T                                         (beta None: v_t k_t^T)
    4. o_t = sum_l lam_t^(l) S^(l) q_t

Step 3 adds rather than assigns: after a merge S^(0) is zero, so the two agree for every state the
recurrence reaches from zero; adding also gives a nonzero state at position 0 a meaning.
With lam None there is a single level, no merge, and o_t = S q_t.
"""

from __future__ import annotations

import torch
from torch import Tensor

from loglinear.kernels.fenwick import fenwick_merge
from loglinear.kernels.state import LogLinearState
from loglinear.kernels.variant import Variant


def recurrent_step(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None, variant: Variant,
    state: LogLinearState,
) -> tuple[Tensor, LogLinearState]:
    """One token for a batch: q, k (B, H, K); v (B, H, V); g, beta (B, H) (beta: delta rule only);
    lam (B, H, L). No host sync."""
    delta = variant is Variant.DELTA_RULE
    S = state.levels  # (B, H, L, V, K)
    # 1. every level sees the token's transition
    if delta:
        Sk = torch.einsum("bhlvk,bhk->bhlv", S, k)  # (B, H, L, V)
        S = S - beta[:, :, None, None, None] * Sk[..., None] * k[:, :, None, None, :]
    S = g.exp()[:, :, None, None, None] * S
    # 2. Fenwick merge
    if lam is not None:
        S = fenwick_merge(S, state.position)
    # 3. the token enters level 0
    w = beta[..., None] * v if delta else v  # (B, H, V)
    S = torch.cat([S[:, :, :1] + (w[..., None] * k[..., None, :])[:, :, None], S[:, :, 1:]], dim=2)
    # 4. read out, each level weighted by lambda
    if lam is None:
        o = torch.einsum("bhvk,bhk->bhv", S[:, :, 0], q)  # (B, H, V)
    else:
        o = torch.einsum("bhlvk,bhk,bhl->bhv", S, q, lam)  # (B, H, V)
    return o, LogLinearState(S, state.position + 1)


def recurrent_log_linear_attn(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None, variant: Variant,
    state: LogLinearState,
) -> tuple[Tensor, LogLinearState]:
    """The loop over time: inputs (B, T, H, *) in the compute dtype; returns o (B, T, H, V) and the state."""
    outputs = []
    for t in range(q.shape[1]):
        o_t, state = recurrent_step(
            q[:, t], k[:, t], v[:, t], g[:, t],
            None if lam is None else lam[:, t],
            None if beta is None else beta[:, t],
            variant,
            state,
        )
        outputs.append(o_t)
    return torch.stack(outputs, dim=1), state

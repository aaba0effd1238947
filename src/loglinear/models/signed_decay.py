"""Signed decays alpha in (-1, 1) for state tracking, through the sign-prefix-product identity.

The operator takes g = log alpha with alpha in (0, 1]. A signed alpha_t factors as s_t |alpha_t|;
with prefix products S_t = prod_{i<=t} s_i, the decay between key s and query t is
prod_{s<i<=t} alpha_i = S_t S_s exp(G_t - G_s), so scaling q_t by S_t and k_s by S_s and passing
g = log|alpha| is exact (docs/operator.md), also for the delta rule (k k^T is unchanged)
and for every lambda (the sign factors out of each level's block).
"""

from __future__ import annotations

import torch
from torch import Tensor

MIN_ABS_DECAY = 1e-6
"""|alpha| is clamped here before the log, so alpha near 0 gives a finite g (a near-total forget)."""


def signed_log_decay(a: Tensor) -> tuple[Tensor, Tensor]:
    """alpha = 2 exp(a) - 1 in (-1, 1] from the usual log-decay a <= 0; returns (log|alpha|, sign(alpha)).

    The [0, 1] -> [-1, 1] map 2x - 1 of Grazzi et al. 2025 ("Unlocking state-tracking in linear RNNs
    through negative eigenvalues") applied to Mamba-2's decay exp(dt * A): alpha < 0 once
    dt * A < -ln 2, and full forgetting (alpha = 0) sits at dt * A = -ln 2 instead of -inf; a very
    large dt * A gives alpha -> -1 (it rounds to -1 once exp(a) is below the float epsilon). Formed
    as 1 + 2 expm1(a) so that alpha near 1 keeps its precision. The sign carries no gradient.
    """
    alpha = 1 + 2 * torch.expm1(a)
    g = torch.log(alpha.abs().clamp_min(MIN_ABS_DECAY))
    sign = torch.where(alpha < 0, -1.0, 1.0).to(a.dtype)
    return g, sign


def apply_sign_prefix(
    q: Tensor, k: Tensor, sign: Tensor, initial: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """q_t * S_t and k_t * S_t with S_t = initial * prod_{i<=t} sign_i.

    q, k (B, T, H, K); sign (B, T, H) in {-1, +1}; initial (B, H) the running product before the
    first token (None: 1). Returns the scaled q, k and S at the last token (the decoding carry).
    """
    S = torch.cumprod(sign, dim=1)  # exact: products of +-1
    if initial is not None:
        S = S * initial[:, None]
    return q * S[..., None], k * S[..., None], S[:, -1]

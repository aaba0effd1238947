"""The public log-linear attention operator: the choice of implementation (guarded by the fused kernels'
self-check), then the implementation (kernels/impls.py); and the decoding step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from loglinear.kernels.checks import check_inputs
from loglinear.kernels.impls import IMPLS, compute_dtype, run_impl, triton_available
from loglinear.kernels.layout import expand_heads
from loglinear.kernels.recurrent import recurrent_step
from loglinear.kernels.selfcheck import CHECKED_DTYPES, Verdict, checked_impl, mode_of
from loglinear.kernels.state import LogLinearState
from loglinear.kernels.triton_limits import unsupported
from loglinear.kernels.variant import Variant


@dataclass(frozen=True)
class Choice:
    """The implementation a call runs, and the self-check verdict it relied on (None where no check applies:
    an implementation other than "triton", or tensors not on a CUDA device)."""

    name: str
    verdict: Verdict | None = None


def resolve_impl(impl: str, q: Tensor, beta: Tensor | None = None, *, selfcheck: str | None = None) -> Choice:
    """`impl`, or for "auto": "triton" for CUDA tensors that are not float64 when triton is installed,
    except for head dims the fused kernels do not take (triton_limits.MAX_K), which fall back to "chunk";
    "chunk" everywhere else. Where "triton" would run on a CUDA device, a known fault that stands on that GPU
    kind (kernels/verified_gpus.py) and then the self-check decide first (kernels/selfcheck.py; `selfcheck`: its
    mode, None for LOGLINEAR_SELFCHECK): either turns "auto" into "chunk" with one warning and makes an explicit
    "triton" raise `SelfCheckFailed`."""
    if impl != "auto" and impl not in IMPLS:
        raise ValueError(f"unknown impl {impl!r}; valid: {', '.join(['auto', *IMPLS])}")
    name = impl
    if impl == "auto":
        on_gpu = isinstance(q, Tensor) and q.is_cuda and q.dtype != torch.float64
        if not (on_gpu and triton_available()):
            return Choice("chunk")
        name = "chunk" if unsupported(q.shape[-1], Variant.of(beta)) else "triton"
    # an explicit "triton" the implementation refuses (no triton, float64) raises its own error when it runs
    if name == "triton" and q.is_cuda and q.dtype in CHECKED_DTYPES and triton_available():
        return Choice(*checked_impl(impl, q.device, q.dtype, mode_of(selfcheck), Variant.of(beta)))
    return Choice(name)


def log_linear_attn(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None = None, *,
    initial_state: LogLinearState | None = None, output_final_state: bool = False,
    impl: str = "auto", chunk_size: int = 64,
) -> tuple[Tensor, LogLinearState | None]:
    """Log-linear attention (docs/operator.md): log-linear Mamba-2 (beta None) or Gated DeltaNet.

    q, k (B, T, HK, K) with H a multiple of HK (v head h reads q/k head h // (H // HK)); v (B, T, H, V);
    g (B, T, H) log-decays (<= 0); lam (B, T, H, L) level weights
    with L >= num_levels(position + T), or None for a single state (plain gated linear attention /
    gated delta rule); beta (B, T, H) or None. Returns o (B, T, H, V) in v's dtype (float32
    accumulation) and the final LogLinearState when `output_final_state`, else None.
    `impl`: a name in IMPLS or "auto" (`resolve_impl`).
    """
    name = resolve_impl(impl, q, beta).name
    return run_impl(name, q, k, v, g, lam, beta, initial_state=initial_state, output_final_state=output_final_state,
                    chunk_size=chunk_size)


def log_linear_attn_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, g_t: Tensor, lam_t: Tensor | None, beta_t: Tensor | None = None,
    state: LogLinearState | None = None,
) -> tuple[Tensor, LogLinearState]:
    """One decoding step: q_t, k_t (B, H, K); v_t (B, H, V); g_t, beta_t (B, H); lam_t (B, H, L).

    `state` (from `log_linear_attn(..., output_final_state=True)`, an earlier step, or None for a
    fresh one with lam_t's L levels) must hold L levels, enough for every position it will reach
    (num_levels(max_len)): the step does no value checks, so that it never synchronises with the host.
    Returns o_t (B, H, V) in v_t's dtype and the next state.
    """
    check_inputs(q_t, k_t, v_t, g_t, lam_t, beta_t, state, has_time=False)
    q_t, k_t = expand_heads(q_t, v_t.shape[1]), expand_heads(k_t, v_t.shape[1])
    dtype = compute_dtype(q_t, k_t, v_t, g_t, lam_t, beta_t)
    if state is None:
        B, H, K = q_t.shape[0], v_t.shape[1], q_t.shape[2]
        L = 1 if lam_t is None else lam_t.shape[-1]
        state = LogLinearState.zeros(B, H, L, v_t.shape[-1], K, device=q_t.device, dtype=dtype)
    cast = [None if x is None else x.to(dtype) for x in (q_t, k_t, v_t, g_t, lam_t, beta_t)]
    state = LogLinearState(state.levels.to(dtype), state.position)
    o_t, state = recurrent_step(*cast, Variant.of(beta_t), state)
    return o_t.to(v_t.dtype), state

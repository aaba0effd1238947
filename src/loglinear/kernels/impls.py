"""The implementations of the log-linear operator and `run_impl`, the operator on a named one: validation,
dtype handling and the call (`api.log_linear_attn` chooses the name)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from loglinear.kernels.checks import check_inputs, check_levels, check_values
from loglinear.kernels.chunk import chunk_log_linear_attn
from loglinear.kernels.layout import expand_heads
from loglinear.kernels.naive import naive_log_linear_attn
from loglinear.kernels.recurrent import recurrent_log_linear_attn
from loglinear.kernels.state import LogLinearState
from loglinear.kernels.triton_limits import unsupported
from loglinear.kernels.variant import Variant

Impl = Callable[..., tuple[Tensor, LogLinearState]]
"""(q, k, v, g, lam, beta, variant, state, out_levels, chunk_size, need_state) -> (o, final state or None):
inputs (B, T, H, *) in the compute dtype (q, k with the heads the record says), `lam` with `out_levels`
levels or None, `state` None or an initial state with `out_levels` levels (1 without lam)."""


@dataclass(frozen=True)
class Implementation:
    """One implementation's contract: what it accepts, and `check`, run at the operator's entry, which
    raises a clear error naming the argument and the limit for anything else."""

    run: Impl
    dtypes: str  # the input dtypes it takes and the dtype it computes in
    grouped_heads: str  # q, k with fewer heads than v (H % HK == 0)
    chunk_sizes: str  # which `chunk_size` it uses (every one must be a power of two)
    states: str  # initial and final states
    check: Callable[[Tensor, Variant], None] = lambda q, variant: None
    reads_grouped_heads: bool = False  # takes grouped q/k as they are; else they are expanded to H heads first


def _naive(q, k, v, g, lam, beta, variant, state, out_levels, chunk_size, need_state=True):
    return naive_log_linear_attn(q, k, v, g, lam, beta, variant, _or_fresh(state, q, v), out_levels)


def _recurrent(q, k, v, g, lam, beta, variant, state, out_levels, chunk_size, need_state=True):
    state = _with_levels(_or_fresh(state, q, v), out_levels)
    return recurrent_log_linear_attn(q, k, v, g, lam, beta, variant, state)


def _chunk(q, k, v, g, lam, beta, variant, state, out_levels, chunk_size, need_state=True):
    return chunk_log_linear_attn(q, k, v, g, lam, beta, variant, state, out_levels, chunk_size, need_state)


@torch.compiler.disable  # inside a compiled model the fused kernels run as they are, between its graphs
def _triton(q, k, v, g, lam, beta, variant, state, out_levels, chunk_size, need_state=True):
    from loglinear.kernels.fused.function import fused_log_linear_attn

    return fused_log_linear_attn(q, k, v, g, lam, beta, variant, state, out_levels, chunk_size)


def _check_triton(q: Tensor, variant: Variant) -> None:
    if not triton_available():
        raise ImportError("impl='triton' needs the triton package (pip install 'loglinear[triton]')")
    if q.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"impl='triton' runs on CUDA tensors (or on CPU with TRITON_INTERPRET=1); q is on {q.device}")
    if q.dtype == torch.float64:
        raise TypeError("impl='triton' computes in float32; float64 inputs need impl='chunk' (or 'naive')")
    refusal = unsupported(q.shape[-1], variant)
    if refusal:
        raise ValueError(refusal)


_FLOATS = "bf16, fp16, fp32 (computed in float32) and float64 (computed in float64)"
IMPLS: dict[str, Implementation] = {
    "naive": Implementation(
        _naive, _FLOATS, "expanded to H heads", "not used (dense in T)", "initial state; final state always computed",
    ),
    "recurrent": Implementation(
        _recurrent, _FLOATS, "expanded to H heads", "not used (one token at a time)",
        "initial state; final state always computed",
    ),
    "chunk": Implementation(
        _chunk, _FLOATS, "one shared head (HK = 1) broadcast in place; other groupings expanded",
        "any power of two, at most the sequence length rounded up to a power of two",
        "initial state (sequences may start at different positions); final state only when asked for",
    ),
    "triton": Implementation(
        _triton, "bf16, fp16, fp32 on CUDA (or CPU with TRITON_INTERPRET=1), accumulated in float32; float64 refused",
        "read in place",
        "a power of two used as min(max(chunk_size, 16), 64) (16: tl.dot's minimum, 64 = MAX_CHUNK: larger blocks "
        "do not fit a GPU block's shared memory); K <= 128 (Mamba-2) or 64 (the delta rule)",
        "initial state (with gradients); final state always computed",
        check=_check_triton, reads_grouped_heads=True,
    ),
}
"""Implementations by name; "auto" is "triton" for CUDA tensors (float64 excepted) and "chunk" elsewhere."""


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def compute_dtype(*xs: Tensor | None) -> torch.dtype:
    return torch.float64 if any(x is not None and x.dtype == torch.float64 for x in xs) else torch.float32


def _or_fresh(state: LogLinearState | None, q: Tensor, v: Tensor) -> LogLinearState:
    B, _, H, K = q.shape
    return state or LogLinearState.zeros(B, H, 1, v.shape[-1], K, device=q.device, dtype=q.dtype)


def _with_levels(state: LogLinearState, levels: int) -> LogLinearState:
    """The same state with `levels` buckets: zero-padded, or summed into one when levels == 1 (lam=None)."""
    S = state.levels
    if S.shape[2] == levels:
        return state
    if levels == 1:
        return LogLinearState(S.sum(2, keepdim=True), state.position)
    pad = S.new_zeros(S.shape[:2] + (levels - S.shape[2],) + S.shape[3:])
    return LogLinearState(torch.cat([S, pad], dim=2), state.position)


def run_impl(
    name: str, q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None = None, *,
    initial_state: LogLinearState | None = None, output_final_state: bool = False, chunk_size: int = 64,
) -> tuple[Tensor, LogLinearState | None]:
    """`log_linear_attn` (kernels/api.py, the same arguments) on the implementation `name`, a key of IMPLS
    (`api.resolve_impl` names one): no choice and no self-check here."""
    if not isinstance(chunk_size, int) or chunk_size < 1 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a power of two >= 1, got {chunk_size!r}")
    check_inputs(q, k, v, g, lam, beta, initial_state, has_time=True)
    variant, implementation = Variant.of(beta), IMPLS[name]
    implementation.check(q, variant)
    check_levels(lam, initial_state, q.shape[1])
    check_values(q, k, v, g, lam, beta)

    dtype = compute_dtype(q, k, v, g, lam, beta)
    native = implementation.reads_grouped_heads
    if not native and not (name == "chunk" and q.shape[2] == 1):  # chunk broadcasts one shared head
        q, k = expand_heads(q, v.shape[2]), expand_heads(k, v.shape[2])
    # the fused path takes its inputs in any float dtype (it hands float32 copies to the kernels)
    cast = [None if x is None else (x if native else x.to(dtype)) for x in (q, k, v, g, lam, beta)]
    in_levels = 1 if initial_state is None else initial_state.levels.shape[2]
    out_levels = 1 if lam is None else max(lam.shape[-1], in_levels)
    state = None
    if initial_state is not None:
        state = LogLinearState(initial_state.levels.to(dtype), initial_state.position)
        if lam is None:
            state = _with_levels(state, 1)
    if lam is not None and lam.shape[-1] < out_levels:  # a deeper initial state: its extra levels read weight 0
        cast[4] = torch.nn.functional.pad(cast[4], (0, out_levels - lam.shape[-1]))
    o, final = implementation.run(*cast, variant, state, out_levels, chunk_size, need_state=output_final_state)
    return o.to(v.dtype), (final if output_final_state else None)

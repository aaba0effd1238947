"""Input validation of the log-linear operator: every error names the argument and the expected shape."""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
from torch import Tensor

from loglinear.kernels.fenwick import num_levels
from loglinear.kernels.state import LogLinearState
from loglinear.kernels.switch import Switch

_VALUE_CHECKS = Switch(True)


def value_checks(enabled: bool) -> AbstractContextManager[None]:
    """Turn the value checks of `log_linear_attn` (g <= 0, finite inputs) on or off inside a block.

    They are on by default; each costs one host synchronisation per call on an accelerator. The
    decoding step never runs them (it must stay free of host synchronisation).
    """
    return _VALUE_CHECKS.set(enabled)


def _fmt(shape: tuple[int | str, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def _check_tensor(name: str, x: object, expected: tuple[int, ...], letters: str, device: torch.device) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {letters}, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if tuple(x.shape) != expected:
        raise ValueError(f"{name} must have shape {letters} = {_fmt(expected)}, got {_fmt(tuple(x.shape))}")
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but q is on {device}; all inputs must share one device")
    return x


def check_inputs(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None,
    state: LogLinearState | None, *, has_time: bool,
) -> None:
    """Shapes, dtypes and devices of the operator's inputs; `has_time` False for the step's (B, H, *) inputs."""
    letters_q = "(B, T, H, K)" if has_time else "(B, H, K)"
    if not isinstance(q, Tensor):
        raise TypeError(f"q must be a torch.Tensor of shape {letters_q}, got {type(q).__name__}")
    if q.dim() != len(letters_q.split(",")):
        raise ValueError(f"q must have shape {letters_q}, got {_fmt(tuple(q.shape))}")
    lead_qk = tuple(q.shape[:-1])  # (B, T, HK) or (B, HK): q/k may have fewer heads than v (GQA)
    lead_letters = "B, T, H" if has_time else "B, H"
    if has_time and q.shape[1] < 1:
        raise ValueError(f"q must have at least one time step (T >= 1), got shape {_fmt(tuple(q.shape))}")
    K = q.shape[-1]
    _check_tensor("q", q, tuple(q.shape), letters_q, q.device)
    _check_tensor("k", k, lead_qk + (K,), f"({lead_letters}, K)", q.device)
    if not isinstance(v, Tensor) or v.dim() != q.dim():
        _check_tensor("v", v, lead_qk + (1,), f"({lead_letters}, V)", q.device)  # raises with the right message
    H = v.shape[-2]
    lead = lead_qk[:-1] + (H,)  # (B, T, H) or (B, H)
    if H % q.shape[-2]:
        raise ValueError(
            f"v has {H} heads, which is not a multiple of q's {q.shape[-2]} (q/k heads are shared by groups of v heads)"
        )
    V = v.shape[-1]
    _check_tensor("v", v, lead + (V,), f"({lead_letters}, V)", q.device)
    _check_tensor("g", g, lead, f"({lead_letters})", q.device)
    if lam is not None:
        if not isinstance(lam, Tensor) or lam.dim() != q.dim() or lam.shape[-1] < 1:
            _check_tensor("lam", lam, lead + (1,), f"({lead_letters}, L)", q.device)
        _check_tensor("lam", lam, lead + (lam.shape[-1],), f"({lead_letters}, L)", q.device)
    if beta is not None:
        _check_tensor("beta", beta, lead, f"({lead_letters})", q.device)
    if state is not None:
        if not isinstance(state, LogLinearState):
            raise TypeError(f"state must be a LogLinearState, got {type(state).__name__}")
        B = q.shape[0]
        S = state.levels
        if (
            not isinstance(S, Tensor)
            or S.dim() != 5
            or (S.shape[0], S.shape[1], S.shape[3], S.shape[4]) != (B, H, V, K)
        ):
            got = _fmt(tuple(S.shape)) if isinstance(S, Tensor) else type(S).__name__
            raise ValueError(f"state.levels must have shape (B, H, L, V, K) = ({B}, {H}, L, {V}, {K}), got {got}")
        if S.device != q.device or state.position.device != q.device:
            raise ValueError(f"state is on {S.device} but q is on {q.device}; all inputs must share one device")
        if tuple(state.position.shape) != (B,) or state.position.dtype != torch.int64:
            raise ValueError(
                f"state.position must be an int64 tensor of shape (B,) = ({B},), "
                f"got {state.position.dtype} {_fmt(tuple(state.position.shape))}"
            )
        if lam is None and S.shape[2] != 1 and not has_time:
            raise ValueError(f"lam=None decodes a single-level state, but state has {S.shape[2]} levels")
        if lam is not None and not has_time and S.shape[2] != lam.shape[-1]:
            raise ValueError(f"state has {S.shape[2]} levels but lam_t has {lam.shape[-1]}; they must match")


def check_levels(lam: Tensor | None, state: LogLinearState | None, T: int) -> int:
    """Levels `lam` must carry for this call (a ValueError when it has fewer); returns the largest end position."""
    start = 0 if state is None else int(state.position.max())
    if state is not None and int(state.position.min()) < 0:
        raise ValueError(f"state.position must be >= 0, got {state.position.tolist()}")
    end = start + T
    if lam is not None and lam.shape[-1] < num_levels(end):
        raise ValueError(
            f"lam has {lam.shape[-1]} levels but {num_levels(end)} are needed for positions up to {end} "
            f"(num_levels({end})); pass lam of shape (B, T, H, L) with L >= {num_levels(end)}"
        )
    if state is not None and lam is not None and state.levels.shape[2] > 1 and start > 0:
        needed = num_levels(start)
        if state.levels.shape[2] < needed:
            raise ValueError(f"state has {state.levels.shape[2]} levels but its position {start} needs {needed}")
    return end


def check_values(q: Tensor, k: Tensor, v: Tensor, g: Tensor, lam: Tensor | None, beta: Tensor | None) -> None:
    """g <= 0, beta in [0, 2] and every input finite (skipped inside `value_checks(False)`)."""
    if not _VALUE_CHECKS:
        return
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("lam", lam), ("beta", beta)):
        # a finite sum proves every entry finite in one pass; only a non-finite sum (maybe an overflow) looks closer
        if x is not None and not bool(torch.isfinite(x.sum())) and not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} of shape {_fmt(tuple(x.shape))} has non-finite values")
    if bool((g > 0).any()):
        raise ValueError(f"g is the log of a decay in (0, 1] and must be <= 0; max is {float(g.max())}")
    if beta is not None and bool(((beta < 0) | (beta > 2)).any()):
        raise ValueError(
            "beta must be in [0, 2] (2: a reflection, eigenvalue -1); "
            f"it ranges over [{float(beta.min())}, {float(beta.max())}]"
        )

"""The fused kernels touch only their arguments' memory (tests/kernels/bounds.py), forward and backward, on
self-check cases covering both variants, levels or none, an initial state, and K = 128."""

from __future__ import annotations

import pytest
import torch

from loglinear.kernels import LogLinearState, log_linear_attn, num_levels
from loglinear.kernels.selfcheck import CASES, Case

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
from tests.kernels.bounds import OutOfBounds, checked_bounds  # noqa: E402  (after the importorskip)


@triton.jit
def _one_past_the_end(x_ptr, y_ptr, n):
    tl.store(y_ptr, tl.load(x_ptr + n))


def test_the_checker_catches_a_load_past_the_end(monkeypatch):
    x, y = torch.zeros(8), torch.zeros(1)
    with checked_bounds(monkeypatch), pytest.raises(Exception) as raised:
        _one_past_the_end[(1,)](x, y, 8)
    assert isinstance(raised.value, OutOfBounds) or isinstance(raised.value.__cause__, OutOfBounds)


def test_the_checker_lets_the_last_element_through(monkeypatch):
    x, y = torch.arange(8.0), torch.zeros(1)
    with checked_bounds(monkeypatch):
        _one_past_the_end[(1,)](x, y, 7)
    assert y.item() == 7.0


def inputs(case: Case):
    gen = torch.Generator().manual_seed(0)
    B, T, H, HK, K, V = case.B, case.T, case.H, case.HK, case.K, case.V
    offsets = [0] * B if case.positions is None else [case.positions[b % len(case.positions)] for b in range(B)]
    L = num_levels(max(offsets) + T)
    k = torch.randn(B, T, HK, K, generator=gen)
    xs = dict(q=torch.randn(B, T, HK, K, generator=gen), k=k / k.norm(dim=-1, keepdim=True),
              v=torch.randn(B, T, H, V, generator=gen), g=-torch.rand(B, T, H, generator=gen),
              lam=torch.rand(B, T, H, L, generator=gen) + 0.1 if case.levels else None,
              beta=torch.rand(B, T, H, generator=gen) if case.delta else None)
    state = None
    if any(offsets):
        levels = torch.randn(B, H, L if case.levels else 1, V, K, generator=gen) * 0.3
        state = LogLinearState(levels.requires_grad_(), torch.tensor(offsets))
    return {n: None if x is None else x.requires_grad_() for n, x in xs.items()}, state


@pytest.mark.parametrize("case", [c for c in CASES if c.T <= 100 or c.K == 128], ids=str)
def test_fused_kernels_stay_inside_their_arguments(case, monkeypatch):
    xs, state = inputs(case)
    with checked_bounds(monkeypatch):
        o, final = log_linear_attn(*xs.values(), initial_state=state, output_final_state=True, impl="triton",
                                   chunk_size=case.chunk_size)
        (o.sum() + final.levels.sum()).backward()

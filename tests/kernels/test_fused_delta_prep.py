"""The delta-rule prep kernels (forward and backward) against a float64 PyTorch oracle on the chunk layout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

pytest.importorskip("triton")

from loglinear.kernels.fused.common import poison_outputs  # noqa: E402  (after the importorskip)
from loglinear.kernels.fused.delta_prep import delta_prep  # noqa: E402  (after the importorskip)
from loglinear.kernels.layout import ChunkLayout  # noqa: E402  (after the importorskip)

# CPU tensors run in Triton's interpreter (tests/conftest.py); with a GPU the same checks run compiled.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _chunked(x: Tensor, layout: ChunkLayout) -> Tensor:
    """(B, T, H, K) -> (B, H, N, C, K), zero on padding slots."""
    t, valid = layout.slot_tokens()  # (B, N*C)
    rows = torch.stack([x[b, t[b].clamp(0, layout.T - 1)] for b in range(x.shape[0])])  # (B, N*C, H, K)
    rows = torch.where(valid[:, :, None, None], rows, torch.zeros_like(rows))
    return rows.unflatten(1, (layout.N, layout.C)).permute(0, 3, 1, 2, 4)


def _unchunked(x: Tensor, layout: ChunkLayout) -> Tensor:
    """(B, H, N, C, K) -> (B, T, H, K), dropping padding slots."""
    flat = x.permute(0, 2, 3, 1, 4).flatten(1, 2)  # (B, N*C, H, K)
    idx = torch.arange(layout.T)[None, :] + layout.shift[:, None].long()  # (B, T)
    return torch.stack([flat[b, idx[b]] for b in range(x.shape[0])])


def oracle(q: Tensor, k: Tensor, G: Tensor, beta: Tensor, layout: ChunkLayout) -> tuple[Tensor, ...]:
    """The module docstring's math in plain PyTorch (differentiable, run in float64)."""
    H = beta.shape[2]
    group = H // q.shape[2]
    Q = _chunked(q.repeat_interleave(group, dim=2), layout)  # (B, H, N, C, K)
    Kc = _chunked(k.repeat_interleave(group, dim=2), layout)
    bc = _chunked(beta[..., None], layout)[..., 0]  # (B, H, N, C)
    Gc = G.unflatten(-1, (layout.N, layout.C))  # (B, H, N, C)
    C, K = layout.C, q.shape[-1]
    causal = torch.ones(C, C, dtype=torch.bool).tril()
    MS = (Gc[..., :, None] - Gc[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    Lm = (bc[..., :, None] * (Kc @ Kc.mT) * MS).tril(-1)
    eye = torch.eye(C, dtype=Q.dtype)
    Tb = torch.linalg.solve_triangular(eye + Lm, torch.diag_embed(bc), upper=False, unitriangular=True)
    A = ((Q @ Kc.mT) * MS) @ Tb
    eG = Gc.exp()[..., None]
    gamma = (Gc[..., -1:] - Gc).exp()[..., None]
    R = eG * Q - A @ (eG * Kc)
    Kd = Tb.mT @ (gamma * Kc)
    P = Gc[..., -1].exp()[..., None, None] * torch.eye(K, dtype=Q.dtype) - (eG * Kc).mT @ Kd
    return A, _unchunked(R, layout), _unchunked(Kd, layout), P


def make(B, T, H, Hk, K, shifts, C=16, dtype=torch.float32, beta_range=(0.0, 2.0), seed=0):
    """Start positions p0 (sequence b at shifts[b] + 2*C*b, so shift = shifts), C, and random inputs on DEVICE."""
    gen = torch.Generator().manual_seed(seed)
    p0 = torch.tensor(shifts, dtype=torch.int64) + 2 * C * torch.arange(B)
    q = torch.randn(B, T, Hk, K, generator=gen) / K**0.5
    k = torch.randn(B, T, Hk, K, generator=gen)
    k = k / k.norm(dim=-1, keepdim=True)
    lo, hi = beta_range
    beta = lo + (hi - lo) * torch.rand(B, T, H, generator=gen)
    G = ChunkLayout.build(p0, T, C).chunk_cumsum(-F.softplus(torch.randn(B, T, H, generator=gen)))
    return p0, C, q.to(DEVICE, dtype), k.to(DEVICE, dtype), G.to(DEVICE), beta.to(DEVICE, dtype)


def rel(x: Tensor, y: Tensor) -> float:
    x, y = x.detach().cpu().double(), y.detach().cpu().double()
    return float((x - y).norm() / y.norm().clamp_min(1e-30))


def check(p0, C, q, k, G, beta, tol, used=(0, 1, 2, 3), seed=1):
    """Kernel outputs and the gradients of sum(out_j * up_j) over the `used` outputs vs the oracle."""
    T = q.shape[1]
    inputs = [x.detach().requires_grad_() for x in (q, k, G, beta)]
    with poison_outputs():
        outs = delta_prep(*inputs, ChunkLayout.build(p0.to(DEVICE), T, C))
    ref_inputs = [x.detach().cpu().double().requires_grad_() for x in (q, k, G, beta)]
    refs = oracle(*ref_inputs, ChunkLayout.build(p0, T, C))
    for name, out, ref in zip(("A", "R", "Kd", "P"), outs, refs, strict=True):
        assert out.dtype == torch.float32 and out.shape == ref.shape, name
        assert not out.isnan().any(), f"{name}: unwritten elements"
        assert rel(out, ref) < tol, (name, rel(out, ref))

    gen = torch.Generator().manual_seed(seed)
    ups = [torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in refs]
    grads = torch.autograd.grad([outs[j] for j in used], inputs, [ups[j].to(DEVICE, torch.float32) for j in used])
    ref_grads = torch.autograd.grad([refs[j] for j in used], ref_inputs, [ups[j] for j in used], allow_unused=True)
    for name, x, grad, ref in zip(("q", "k", "G", "beta"), inputs, grads, ref_grads, strict=True):
        ref = torch.zeros(x.shape, dtype=torch.float64) if ref is None else ref  # P does not depend on q
        assert grad.dtype == x.dtype and grad.shape == x.shape, name
        assert rel(grad, ref) < tol, (name, rel(grad, ref))


@pytest.mark.parametrize(
    "B, T, Hk, K, shifts",
    [
        (1, 1, 1, 16, [0]),
        (1, 5, 2, 20, [0]),
        (2, 16, 1, 32, [3, 11]),
        (2, 37, 2, 20, [3, 11]),
        (1, 37, 1, 16, [0]),
    ],
)
def test_matches_oracle(B, T, Hk, K, shifts):
    check(*make(B, T, 2, Hk, K, shifts[:B]), tol=1e-5)


def test_chunk_size_32():
    check(*make(2, 37, 2, 1, 20, [5, 30], C=32), tol=1e-5)


@pytest.mark.parametrize("used", [(0,), (1, 2), (3,), (0, 3)])
def test_some_outputs_unused(used):
    """Absent upstream gradients (None in backward) count as zero."""
    check(*make(2, 21, 2, 2, 16, [3, 11]), tol=1e-5, used=used)


def test_beta_near_two():
    """beta close to 2 (where a Neumann series for the solve would blow up)."""
    check(*make(1, 32, 2, 1, 16, [0], beta_range=(1.9, 2.0), seed=3), tol=1e-5)


def test_bfloat16_inputs():
    check(*make(2, 37, 2, 1, 32, [3, 11], dtype=torch.bfloat16), tol=2e-2)


@pytest.mark.parametrize("K, C", [(65, 16), (16, 8), (16, 128)])
def test_rejects_unsupported_sizes(K, C):
    p0, _, q, k, _, beta = make(1, 5, 2, 1, K, [0], C=max(C, 16))
    G = torch.zeros(1, 2, ChunkLayout.build(p0, 5, C).N * C, device=DEVICE)
    with pytest.raises(ValueError):
        delta_prep(q, k, G, beta, ChunkLayout.build(p0.to(DEVICE), 5, C))

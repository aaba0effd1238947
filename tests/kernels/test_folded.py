"""Calls folded under vmap: each mapped element's output and gradients are those of the call on it alone."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import vmap

from loglinear.kernels.folded import call_folded, is_mapped, run_impl_mappable
from loglinear.models.layers import _CausalDepthwiseConv


def _inputs(runs: int, B: int = 2, T: int = 37, H: int = 2, K: int = 8, V: int = 8, levels: int = 7):
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(runs, B, T, H, K, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(runs, B, T, H, V, generator=g, dtype=torch.float64)
    gate = -torch.rand(runs, B, T, H, generator=g, dtype=torch.float64)
    lam = torch.rand(runs, B, T, H, levels, generator=g, dtype=torch.float64)
    beta = torch.rand(runs, B, T, H, generator=g, dtype=torch.float64)
    return [x.requires_grad_() for x in (q, k, v, gate, lam, beta)]


def test_the_operator_under_vmap_is_the_operator_on_each_run():
    for name in ("chunk", "naive"):
        for beta_given in (False, True):
            mapped = _inputs(3)
            if beta_given:
                out = vmap(lambda *x: run_impl_mappable(name, *x, chunk_size=16))(*mapped)  # noqa: B023
            else:
                out = vmap(lambda *x: run_impl_mappable(name, *x, None, chunk_size=16))(*mapped[:5])  # noqa: B023
            out.pow(2).sum().backward()
            for r in range(3):
                each = [x[r].detach().clone().requires_grad_() for x in mapped]
                alone = run_impl_mappable(name, *each[:5], each[5] if beta_given else None, chunk_size=16)
                alone.pow(2).sum().backward()
                assert torch.allclose(out[r], alone, atol=1e-12)
                for x, y in zip(mapped[:6 if beta_given else 5], each, strict=False):
                    assert torch.allclose(x.grad[r], y.grad, atol=1e-10)
            for x in mapped:
                x.grad = None


def test_attention_folded_under_vmap_matches_and_plain_calls_pass_through():
    q, k, v = (torch.randn(4, 2, 3, 11, 8, dtype=torch.float64) for _ in range(3))
    out = vmap(lambda a, b, c: call_folded(F.scaled_dot_product_attention, a, b, c, is_causal=True))(q, k, v)
    for r in range(4):
        assert torch.allclose(out[r], F.scaled_dot_product_attention(q[r], k[r], v[r], is_causal=True), atol=1e-12)
    assert not is_mapped(q, None)
    assert torch.equal(call_folded(torch.neg, q), -q)


def test_the_short_convolution_under_vmap_keeps_each_run_s_weights():
    x = torch.randn(3, 2, 9, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    out = vmap(_CausalDepthwiseConv.apply)(x, w)
    out.pow(2).sum().backward()
    for r in range(3):
        xr, wr = x[r].detach().clone().requires_grad_(), w[r].detach().clone().requires_grad_()
        alone = _CausalDepthwiseConv.apply(xr, wr)
        alone.pow(2).sum().backward()
        assert torch.allclose(out[r], alone) and torch.allclose(x.grad[r], xr.grad) and torch.allclose(w.grad[r],
                                                                                                     wr.grad)


def test_the_fused_kernels_under_vmap_are_the_fused_kernels_on_each_run():
    """The fused path (here in Triton's interpreter) folds the runs into its batch: vmap never looks inside it."""
    mapped = [x.detach().float().requires_grad_() for x in _inputs(2, B=1, T=40, H=1, K=16, V=16)]
    out = vmap(lambda *x: run_impl_mappable("triton", *x, chunk_size=16))(*mapped)
    out.pow(2).sum().backward()
    for r in range(2):
        each = [x[r].detach().clone().requires_grad_() for x in mapped]
        alone = run_impl_mappable("triton", *each, chunk_size=16)
        alone.pow(2).sum().backward()
        assert torch.allclose(out[r], alone, atol=1e-5)
        for x, y in zip(mapped, each, strict=True):
            assert torch.allclose(x.grad[r], y.grad, atol=1e-4)

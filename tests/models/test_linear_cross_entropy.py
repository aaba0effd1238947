"""The loss fused with the LM head (`linear_cross_entropy`) against the unfused form it replaces: the LM head's
logits, then `F.cross_entropy` over the vocabulary; in float64 to 1e-12, in float32 to its rounding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from loglinear.models import build_model
from loglinear.models.linear_cross_entropy import linear_cross_entropy


def unfused(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy((h @ weight.T).to(torch.promote_types(h.dtype, torch.float32)), targets)


def both(n: int, dtype: torch.dtype, chunk: int = 32, vocab: int = 300, d: int = 16, device: str = "cpu"):
    """(loss, gradients of h and the weight, predictions) of the fused and the unfused form on one draw."""
    generator = torch.Generator().manual_seed(n)
    h = torch.randn(n, d, generator=generator, dtype=dtype).to(device).requires_grad_()
    weight = (torch.randn(vocab, d, generator=generator, dtype=dtype) * 0.5).to(device).requires_grad_()
    targets = torch.randint(0, vocab, (n,), generator=generator).to(device)
    loss, predicted = linear_cross_entropy(h, weight, targets, predict=True, chunk=chunk)
    fused = (loss, *torch.autograd.grad(loss, (h, weight)), predicted)
    loss = unfused(h, weight, targets)
    return fused, (loss, *torch.autograd.grad(loss, (h, weight)), (h @ weight.T).argmax(-1))


@pytest.mark.parametrize("n", [1, 31, 32, 33, 200])
def test_the_fused_loss_is_the_unfused_one_in_float64(n):
    fused, reference = both(n, torch.float64)
    for got, want in zip(fused[:3], reference[:3], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(fused[3], reference[3])


def test_the_fused_loss_is_the_unfused_one_to_float32_rounding():
    fused, reference = both(500, torch.float32)
    for got, want in zip(fused[:3], reference[:3], strict=True):
        torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-7)
    assert torch.equal(fused[3], reference[3])
    assert fused[2].is_contiguous()  # the weight's gradient in the weight's layout


@pytest.mark.gpu
def test_the_fused_loss_is_the_unfused_one_on_cuda():
    fused, reference = both(500, torch.float32, vocab=8192, device="cuda")
    for got, want in zip(fused[:3], reference[:3], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert (fused[3] == reference[3]).float().mean() > 0.99  # ties aside, as the unfused argmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_target_whose_probability_underflows_gets_its_loss_from_its_logits(dtype):
    """Logits far apart (a gap of 1,000 and more) put some targets' softmax probabilities below the dtype's smallest
    number: their loss is still log-sum-exp minus their logit, as the unfused form's, and their gradient p - 1."""
    generator = torch.Generator().manual_seed(1)
    h = (torch.randn(70, 4, generator=generator, dtype=dtype) * 30).requires_grad_()
    weight = (torch.randn(40, 4, generator=generator, dtype=dtype) * 30).requires_grad_()
    targets = torch.randint(0, 40, (70,), generator=generator)
    assert (torch.softmax(h @ weight.T, -1).gather(1, targets[:, None]) == 0).sum() > 10
    loss, _ = linear_cross_entropy(h, weight, targets)
    want = unfused(h, weight, targets)
    torch.testing.assert_close(loss, want, rtol=1e-12 if dtype == torch.float64 else 2e-6, atol=0)
    for got, ref in zip(torch.autograd.grad(loss, (h, weight)), torch.autograd.grad(want, (h, weight)), strict=True):
        torch.testing.assert_close(got, ref)


def test_no_position_gives_zero_with_a_zero_gradient():
    h, weight = torch.randn(0, 4, requires_grad=True), torch.randn(10, 4, requires_grad=True)
    loss, predicted = linear_cross_entropy(h, weight, torch.zeros(0, dtype=torch.int64), predict=True)
    loss.backward()
    assert float(loss) == 0.0 and predicted.shape == (0,) and torch.equal(weight.grad, torch.zeros(10, 4))


def test_without_a_gradient_it_keeps_none():
    h, weight = torch.randn(40, 4), torch.randn(10, 4)
    targets = torch.randint(0, 10, (40,))
    loss, predicted = linear_cross_entropy(h, weight, targets)
    assert predicted is None and not loss.requires_grad
    torch.testing.assert_close(loss, unfused(h, weight, targets))


def test_a_model_trained_on_it_gets_the_gradient_of_its_tied_head():
    """The LM head tied to the embedding: the fused loss's gradient reaches both uses of the weight, as the logits'
    does."""
    model = build_model(dict(mixer="gated_deltanet", d_model=16, n_layers=1, vocab_size=50), seed=0).double()
    inputs, targets = torch.randint(0, 50, (2, 3, 24))
    mask = torch.rand(3, 24, generator=torch.Generator().manual_seed(0)) < 0.3
    loss, _ = linear_cross_entropy(model.features(inputs, mask), model.lm_head.weight, targets[mask])
    fused = torch.autograd.grad(loss, list(model.parameters()))
    reference = torch.autograd.grad(F.cross_entropy(model(inputs, mask), targets[mask]), list(model.parameters()))
    for got, want in zip(fused, reference, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)

"""The short convolution's own backward against autograd through a padded conv1d (float64)."""

import pytest
import torch
import torch.nn.functional as F

from loglinear.models.layers import ShortConv, _CausalDepthwiseConv


@pytest.mark.parametrize("T", [1, 2, 3, 9])
@pytest.mark.parametrize("bias", [True, False])
def test_short_conv_matches_conv1d_forward_and_gradients(T, bias):
    torch.manual_seed(T)
    conv = ShortConv(5, 4, bias=bias).double()
    x = torch.randn(3, T, 5, dtype=torch.float64, requires_grad=True)
    y = conv(x)
    x_ref, w_ref = x.detach().clone().requires_grad_(), conv.weight.detach().clone().requires_grad_()
    b_ref = None if conv.bias is None else conv.bias.detach()
    ref = F.silu(F.conv1d(F.pad(x_ref.transpose(1, 2), (3, 0)), w_ref[:, None], b_ref, groups=5).transpose(1, 2))
    assert torch.allclose(y, ref, rtol=0, atol=1e-12)
    dy = torch.randn_like(y)
    grads, ref_grads = torch.autograd.grad(y, [x, conv.weight], dy), torch.autograd.grad(ref, [x_ref, w_ref], dy)
    for got, want in zip(grads, ref_grads, strict=True):
        assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert grads[1].is_contiguous()  # the weight's gradient in the weight's layout
    inputs = (x.detach()[:1].clone().requires_grad_(), conv.weight.detach().clone().requires_grad_())
    assert torch.autograd.gradcheck(_CausalDepthwiseConv.apply, inputs)

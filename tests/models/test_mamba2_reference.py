"""Our Mamba-2 mixer against an independent implementation, Hugging Face transformers' Mamba2Mixer (its plain
PyTorch path): the same function on copied weights, forward and gradients in float64; and our init options
that name the reference's rules start from its distributions."""

import math

import pytest
import torch

from loglinear.models import build_model
from loglinear.models.config import ModelConfig

from .helpers import rel_err

modeling = pytest.importorskip("transformers.models.mamba2.modeling_mamba2", reason="transformers not installed")

D_MODEL = 16
REFERENCE_INIT = dict(A_init="arange", in_proj_std=0.1, out_proj_init="fan_in_uniform", conv_bias_init="zero")
"""Our options for the reference's initialisation (Mamba2Config's defaults: initializer_range 0.1, no rescale)."""
TOL = 1e-6


def reference_config(cfg: ModelConfig):
    """The reference's config for the shape of our Mamba-2 with `cfg` (one group, no biases but the conv's)."""
    heads = cfg.expand * cfg.d_model // cfg.head_dim
    return modeling.Mamba2Config(
        hidden_size=cfg.d_model, num_heads=heads, head_dim=cfg.head_dim, state_size=cfg.state_dim,
        expand=cfg.expand, n_groups=1, conv_kernel=cfg.conv_size, use_bias=False, use_conv_bias=True,
        layer_norm_epsilon=cfg.norm_eps, chunk_size=cfg.chunk_size, num_hidden_layers=1, vocab_size=cfg.vocab_size,
    )


def copy_into_reference(ours: torch.nn.Module, ref: torch.nn.Module) -> None:
    """Our in_proj rows are [x B C | z | dt], the reference's [z | x B C | dt]; every other tensor maps as is."""
    conv_width, d_inner, _ = ours.widths
    x_bc, z, dt = ours.in_proj.weight.split(ours.widths)
    with torch.no_grad():
        ref.in_proj.weight.copy_(torch.cat([z, x_bc, dt]))
        ref.conv1d.weight.copy_(ours.conv.weight[:, None, :])
        ref.conv1d.bias.copy_(ours.conv.bias)
        for name in ("dt_bias", "A_log", "D"):
            getattr(ref, name).copy_(getattr(ours, name))
        ref.norm.weight.copy_(ours.norm.weight)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
    assert conv_width == d_inner + 2 * ours.key_dim


@pytest.mark.parametrize("T", [64, 100, 257])
def test_the_mixer_computes_the_reference_function_on_copied_weights(T):
    """Forward and every parameter's gradient in float64, at lengths below, across and off the chunk size. The
    reference casts A and its gated norm to float32 whatever the input's dtype: agreement is to float32's rounding
    (a different function would differ by orders more)."""
    cfg = ModelConfig(mixer="mamba2", d_model=D_MODEL, n_layers=1, vocab_size=32, max_len=512, impl="chunk")
    ours = build_model(cfg, seed=0).double().blocks[0].mixer
    ref = modeling.Mamba2Mixer(reference_config(cfg), layer_idx=0).eval().double()
    copy_into_reference(ours, ref)
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    y, y_ref = ours(x), ref(x)
    assert rel_err(y.detach(), y_ref.detach()) < TOL
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    (y_ref * dy).sum().backward()
    grads = {"in_proj": ours.in_proj.weight.grad.split(ours.widths), "out_proj": ours.out_proj.weight.grad}
    x_bc, z, dt = grads["in_proj"]
    assert rel_err(torch.cat([z, x_bc, dt]), ref.in_proj.weight.grad) < TOL
    assert rel_err(grads["out_proj"], ref.out_proj.weight.grad) < TOL
    assert rel_err(ours.conv.weight.grad, ref.conv1d.weight.grad[:, 0]) < TOL
    for name in ("dt_bias", "A_log", "D"):
        assert rel_err(getattr(ours, name).grad, getattr(ref, name).grad) < TOL, name
    assert rel_err(ours.conv.bias.grad, ref.conv1d.bias.grad) < TOL
    assert rel_err(ours.norm.weight.grad, ref.norm.weight.grad) < TOL


def test_the_reference_init_options_start_from_the_references_distributions():
    """A = 1..H exactly; in_proj N(0, 0.1^2); out_proj U(+-1/sqrt(d_inner)); conv bias 0, conv weight
    U(+-1/sqrt(k)); D = 1; dt log-uniform in the same range. Wide enough (d_model 256) for the statistics."""
    cfg = ModelConfig(mixer="mamba2", d_model=256, n_layers=1, vocab_size=32, max_len=64, **REFERENCE_INIT)
    ours = build_model(cfg, seed=0).blocks[0].mixer
    model = modeling.Mamba2Model(reference_config(cfg))  # its own init (post_init), as a user gets it
    ref = model.layers[0].mixer
    assert torch.equal(ours.A_log, ref.A_log.detach())
    assert torch.equal(ours.D, ref.D.detach())
    for a, b in ((ours.in_proj.weight, ref.in_proj.weight), (ours.out_proj.weight, ref.out_proj.weight),
                 (ours.conv.weight, ref.conv1d.weight)):
        assert abs(a.std().item() / b.std().item() - 1) < 0.05
        assert abs(a.mean().item()) < 0.05 * a.std().item() and abs(b.mean().item()) < 0.05 * b.std().item()
    assert abs(ours.in_proj.weight.std().item() / 0.1 - 1) < 0.02
    for a, b in ((ours.out_proj.weight, ref.out_proj.weight), (ours.conv.weight, ref.conv1d.weight)):
        assert a.abs().max() <= b.abs().max() * 1.01 and b.abs().max() <= a.abs().max() * 1.01  # the same bound
    assert ours.out_proj.weight.abs().max() <= 1 / math.sqrt(ours.out_proj.in_features)
    assert not ours.conv.bias.any() and not ref.conv1d.bias.any()
    dt, dt_ref = (torch.nn.functional.softplus(p.detach()) for p in (ours.dt_bias, ref.dt_bias))
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 0.1 * (1 + 1e-5)
    assert dt_ref.min() >= 1e-3 * (1 - 1e-5) and dt_ref.max() <= 0.1 * (1 + 1e-5)

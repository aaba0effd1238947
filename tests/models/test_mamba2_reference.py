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
GRAD_TOL = 5e-6
"""Room for the reference's float32 gated norm, whose rounding a gradient that nearly cancels (A_log's, dt_bias's)
amplifies: at most 7e-7 measured over 15 draws of the output's gradient; a different function differs by orders
more."""


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


def centred(w: torch.Tensor) -> bool:
    """The mean of w's entries within 4 standard errors of 0."""
    return abs(w.mean().item()) < 4 * w.std().item() / math.sqrt(w.numel())


@pytest.fixture
def reference_scan_in_float64(monkeypatch):
    """The reference's torch path casts its scan's inputs and A to float32 (`.float()`) whatever the input's dtype;
    at T = 257 that rounding alone moved A_log's gradient (a sum of many small terms that nearly cancel) by 4e-5 of
    its size. Here `.float()` leaves a float64 tensor as it is, so that the comparison measures the function, not
    float32's rounding; only the reference's gated norm still rounds to float32."""
    to_float = torch.Tensor.float

    def keep_float64(x, *args, **kwargs):
        return x if x.dtype == torch.float64 else to_float(x, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "float", keep_float64)


@pytest.mark.parametrize("T", [64, 100, 257])
def test_the_mixer_computes_the_reference_function_on_copied_weights(T, reference_scan_in_float64):
    """Forward and every parameter's gradient in float64, at lengths below, across and off the chunk size, to
    the rounding of the reference's float32 gated norm (a different function would differ by orders more)."""
    cfg = ModelConfig(mixer="mamba2", d_model=D_MODEL, n_layers=1, vocab_size=32, max_len=512, impl="chunk")
    ours = build_model(cfg, seed=0).double().blocks[0].mixer
    ref = modeling.Mamba2Mixer(reference_config(cfg), layer_idx=0).eval().double()
    copy_into_reference(ours, ref)
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    y, y_ref = ours(x), ref(x)
    assert rel_err(y.detach(), y_ref.detach()) < TOL
    dy = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(T + 1))
    (y * dy).sum().backward()
    (y_ref * dy).sum().backward()
    grads = {"in_proj": ours.in_proj.weight.grad.split(ours.widths), "out_proj": ours.out_proj.weight.grad}
    x_bc, z, dt = grads["in_proj"]
    assert rel_err(torch.cat([z, x_bc, dt]), ref.in_proj.weight.grad) < GRAD_TOL
    assert rel_err(grads["out_proj"], ref.out_proj.weight.grad) < GRAD_TOL
    assert rel_err(ours.conv.weight.grad, ref.conv1d.weight.grad[:, 0]) < GRAD_TOL
    for name in ("dt_bias", "A_log", "D"):
        assert rel_err(getattr(ours, name).grad, getattr(ref, name).grad) < GRAD_TOL, name
    assert rel_err(ours.conv.bias.grad, ref.conv1d.bias.grad) < GRAD_TOL
    assert rel_err(ours.norm.weight.grad, ref.norm.weight.grad) < GRAD_TOL


def test_the_reference_init_options_start_from_the_references_distributions():
    """A = 1..H exactly; in_proj N(0, 0.1^2); out_proj U(+-1/sqrt(d_inner)); conv bias 0, conv weight
    U(+-1/sqrt(k)); D = 1; dt log-uniform in the same range. Wide enough (d_model 256) for the statistics."""
    cfg = ModelConfig(mixer="mamba2", d_model=256, n_layers=1, vocab_size=32, max_len=64, **REFERENCE_INIT)
    ours = build_model(cfg, seed=0).blocks[0].mixer
    with torch.random.fork_rng():  # the reference draws from the global generator: seeded, and left as it was
        torch.manual_seed(0)
        model = modeling.Mamba2Model(reference_config(cfg))  # its own init (post_init), as a user gets it
    ref = model.layers[0].mixer
    assert torch.equal(ours.A_log, ref.A_log.detach())
    assert torch.equal(ours.D, ref.D.detach())
    for a, b in ((ours.in_proj.weight, ref.in_proj.weight), (ours.out_proj.weight, ref.out_proj.weight),
                 (ours.conv.weight, ref.conv1d.weight)):
        assert abs(a.std().item() / b.std().item() - 1) < 0.05
        assert centred(a) and centred(b)
    assert abs(ours.in_proj.weight.std().item() / 0.1 - 1) < 0.02
    for a, b in ((ours.out_proj.weight, ref.out_proj.weight), (ours.conv.weight, ref.conv1d.weight)):
        assert a.abs().max() <= b.abs().max() * 1.01 and b.abs().max() <= a.abs().max() * 1.01  # the same bound
    assert ours.out_proj.weight.abs().max() <= 1 / math.sqrt(ours.out_proj.in_features)
    assert not ours.conv.bias.any() and not ref.conv1d.bias.any()
    dt, dt_ref = (torch.nn.functional.softplus(p.detach()) for p in (ours.dt_bias, ref.dt_bias))
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 0.1 * (1 + 1e-5)
    assert dt_ref.min() >= 1e-3 * (1 - 1e-5) and dt_ref.max() <= 0.1 * (1 + 1e-5)

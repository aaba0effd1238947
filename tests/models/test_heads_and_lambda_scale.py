"""Per-mixer head counts (a preset's attention heads never reach Gated DeltaNet) and the official log-linear
Gated DeltaNet's lambda scale (lambda / K^-0.5), which changes the lambda the operator sees and nothing else."""

from __future__ import annotations

import pytest
import torch

import loglinear.models.linear_mixer as linear_mixer
from loglinear.models import MIXERS, ModelConfig, build_model

OPERATOR = {name: (getattr(linear_mixer, name), first) for name, first in (("run_impl_mappable", 1),
                                                                           ("log_linear_attn_step", 0))}
"""The mixers' operator calls, and where their (q, k, v, g, lam, beta) start (run_impl_mappable takes the impl's
name first)."""


def heads(**fields) -> int:
    return MIXERS[fields["mixer"]].num_heads(ModelConfig(**fields))


@pytest.mark.parametrize("d_model, deltanet", [(16, 1), (32, 2), (64, 2), (512, 4)])
def test_each_mixer_reads_only_its_own_head_count(d_model, deltanet):
    for mixer in ("gated_deltanet", "log_linear_gated_deltanet"):
        assert heads(mixer=mixer, d_model=d_model, attention_heads=4) == deltanet
        assert heads(mixer=mixer, d_model=d_model, attention_heads=4, deltanet_heads=d_model // 16) == d_model // 16
    assert heads(mixer="attention", d_model=d_model, deltanet_heads=1) == max(1, d_model // 64)
    assert heads(mixer="attention", d_model=d_model, attention_heads=2, deltanet_heads=1) == 2


def _operator_calls(monkeypatch, model, inputs):
    """The inputs of every operator call of `model(inputs)` and of decoding inputs[:, :3] token by token."""
    calls = []

    def record(real, first):
        def wrapped(*args, **kwargs):
            calls.append([a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args[first:first + 6]])
            return real(*args, **kwargs)
        return wrapped

    for name, (real, first) in OPERATOR.items():
        monkeypatch.setattr(linear_mixer, name, record(real, first))
    with torch.no_grad():
        model(inputs)
        mixer = model.blocks[0].mixer
        cache = mixer.init_cache(inputs.shape[0], 8, device=inputs.device, dtype=torch.float64)
        x = torch.randn(
            inputs.shape[0], 3, model.cfg.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
        )
        for t in range(3):
            _, cache = mixer.step(x[:, t], cache)
    return calls


@pytest.mark.parametrize("d_model, deltanet_heads, key_dim", [(16, None, None), (32, None, None), (32, 4, None),
                                                             (16, 2, 43)])
def test_lambda_scale_changes_only_the_lambda_scale(tiny, monkeypatch, d_model, deltanet_heads, key_dim):
    """Same parameters; every operator input equal except lambda, which is sqrt(K) times larger (parallel
    and decoding), K the head's key dim (deltanet_key_dim when it is set)."""
    def make(scale: bool):
        cfg = tiny(mixer="log_linear_gated_deltanet", d_model=d_model, n_layers=1, deltanet_heads=deltanet_heads,
                   deltanet_key_dim=key_dim, scale_lambda=scale)
        return build_model(cfg).double()

    torch.manual_seed(0)
    official = make(True)
    plain = make(False)
    assert official.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(official.state_dict())
    key_dim = official.blocks[0].mixer.key_dim
    assert key_dim == (key_dim or d_model // official.blocks[0].mixer.n_heads)
    inputs = torch.randint(0, 32, (2, 11))
    scaled, unscaled = _operator_calls(monkeypatch, official, inputs), _operator_calls(monkeypatch, plain, inputs)
    assert len(scaled) == len(unscaled) == 4
    for a, b in zip(scaled, unscaled, strict=True):
        q, k, v, g, lam, beta = range(6)
        for i in (q, k, v, g, beta):
            torch.testing.assert_close(a[i], b[i], rtol=0, atol=0)
        torch.testing.assert_close(a[lam], b[lam] * key_dim**0.5, rtol=1e-12, atol=0)
    with torch.no_grad():
        assert not torch.allclose(official(inputs), plain(inputs))


def test_lambda_scale_is_the_default_and_only_for_gated_deltanet(tiny):
    assert ModelConfig().scale_lambda is True
    torch.manual_seed(0)
    a = build_model(tiny(mixer="log_linear_mamba2", scale_lambda=True)).double()
    b = build_model(tiny(mixer="log_linear_mamba2", scale_lambda=False)).double()
    b.load_state_dict(a.state_dict())
    inputs = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(a(inputs), b(inputs), rtol=0, atol=0)


@pytest.mark.parametrize("mixer, states", [("gated_deltanet", (448, 1988)),
                                           ("log_linear_gated_deltanet", (1984, 10244))])
def test_the_deltanet_key_dim_widens_keys_and_queries_only(tiny, mixer, states):
    """deltanet_key_dim sets each head's K (q, k and the state's key axis); the value dim and the heads stay.
    State at 64 tokens: 2 heads x K x 16 per level (1 level, or 7 with lambda) + 3 conv inputs of 2 x 2K + 32
    channels, so K = 8: 256 + 192 per level state; K = 43: 1,376 + 612."""
    default = build_model(tiny(mixer=mixer, d_model=16, deltanet_heads=2)).blocks[0].mixer
    wide = build_model(tiny(mixer=mixer, d_model=16, deltanet_heads=2, deltanet_key_dim=43)).blocks[0].mixer
    assert (default.n_heads, default.key_dim, default.value_dim) == (2, 8, 16)
    assert (wide.n_heads, wide.key_dim, wide.value_dim) == (2, 43, 16)
    assert (default.state_size(64), wide.state_size(64)) == states


def test_the_deltanet_key_dim_must_be_positive():
    with pytest.raises(ValueError, match="deltanet_key_dim"):
        ModelConfig(mixer="gated_deltanet", deltanet_key_dim=0)

"""Forward and backward of every mixer and lambda parameterisation; negative-eigenvalue options; impl agreement."""

import pytest
import torch

from loglinear.models import LAMBDA_PARAMS, MIXERS, build_model, linear_mixer
from loglinear.models.signed_decay import apply_sign_prefix, signed_log_decay

from .helpers import LINEAR, LOG_LINEAR


def _train_step(model, T=21):
    inputs = torch.randint(0, model.cfg.vocab_size, (2, T))
    loss = model(inputs).logsumexp(-1).mean()
    loss.backward()
    return loss


@pytest.mark.parametrize("mixer", MIXERS.names())
def test_forward_backward(tiny, mixer):
    torch.manual_seed(0)
    model = build_model(tiny(mixer=mixer))
    assert torch.isfinite(_train_step(model))
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("lambda_param", LAMBDA_PARAMS.names())
@pytest.mark.parametrize("mixer", LOG_LINEAR)
@pytest.mark.parametrize("bias_init", ["none", "decay"])
def test_lambda_params_forward_backward(tiny, mixer, lambda_param, bias_init):
    torch.manual_seed(0)
    model = build_model(
        tiny(mixer=mixer, lambda_param=lambda_param, lambda_bias_init=bias_init, lambda_share_from_level=4)
    )
    assert torch.isfinite(_train_step(model))
    head = model.blocks[0].mixer.lambda_head
    assert (head.proj is not None) == LAMBDA_PARAMS[lambda_param].data_dependent
    for name, p in head.named_parameters():  # every lambda parameter is trained, the projection included
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("mixer", LINEAR)
def test_implementations_agree(tiny, mixer):
    torch.manual_seed(0)
    model = build_model(tiny(mixer=mixer, impl="naive", negative_eigenvalues=True)).double()
    inputs = torch.randint(0, 32, (2, 19))
    reference = model(inputs)
    for impl in ("recurrent", "chunk"):
        for block in model.blocks:
            block.mixer.impl = impl
        torch.testing.assert_close(model(inputs), reference, rtol=1e-10, atol=1e-12)


def test_each_linear_mixer_records_the_implementations_it_ran(tiny):
    model = build_model(tiny(mixer="gated_deltanet", impl="auto"))
    assert model.implementations() == {}
    inputs = torch.randint(0, 32, (1, 9))
    model(inputs)
    model(inputs)
    chunk = {"impl": "chunk", "selfcheck": None}  # auto on the CPU: chunk, no check applies
    assert model.implementations() == {"blocks.0.mixer": [chunk], "blocks.1.mixer": [chunk]}
    model.blocks[1].mixer.impl = "naive"
    model(inputs)
    assert model.implementations()["blocks.1.mixer"] == [chunk, {"impl": "naive", "selfcheck": None}]
    attention = build_model(tiny(mixer="attention"))
    attention(inputs)
    assert attention.implementations() == {}


def test_gated_deltanet_beta_range_gives_negative_eigenvalues(tiny):
    """The delta-rule transition (I - beta k k^T) has eigenvalue 1 - beta along k (|k| = 1): negative iff beta > 1."""
    torch.manual_seed(0)
    x = 3 * torch.randn(4, 50, 16)
    for negative, lo, hi in ((False, 0.0, 1.0), (True, 0.0, 2.0)):
        mixer = MIXERS["gated_deltanet"](tiny(mixer="gated_deltanet", negative_eigenvalues=negative))
        conv_in, rest = mixer._project(x)
        beta = mixer.operator_inputs(mixer.conv(conv_in), rest).beta
        assert lo < beta.min() and beta.max() < hi
        assert (beta > 1).any() == negative  # eigenvalue 1 - beta < 0 occurs only with the option


@pytest.mark.parametrize("mixer", ["mamba2", "log_linear_mamba2"])
def test_mamba2_signed_decay_gives_negative_eigenvalues(tiny, mixer):
    """Eigenvalue of the Mamba-2 transition = the decay alpha_t = sign * exp(g); in [-1, 1] with the option."""
    torch.manual_seed(0)
    x = 3 * torch.randn(4, 50, 16)
    for negative in (False, True):
        m = MIXERS[mixer](tiny(mixer=mixer, negative_eigenvalues=negative))
        conv_in, rest = m._project(x)
        inp = m.operator_inputs(m.conv(conv_in), rest)
        alpha = inp.g.exp() * (1 if inp.sign is None else inp.sign)
        assert alpha.max() <= 1 and alpha.min() >= (-1 if negative else 0)
        assert (alpha < 0).any() == negative


def test_signed_log_decay_values():
    a = torch.tensor([0.0, -0.1, -0.6931471805599453, -1.0, -30.0], dtype=torch.float64)
    g, sign = signed_log_decay(a)
    alpha = 2 * a.exp() - 1
    assert sign.tolist() == [1.0, 1.0, 1.0, -1.0, -1.0]
    torch.testing.assert_close(g[[0, 1, 3, 4]], alpha[[0, 1, 3, 4]].abs().log())
    assert torch.isfinite(g).all()  # alpha = 0 is clamped, not -inf


def test_sign_prefix_equals_signed_products():
    """q_t S_t . k_s S_s = q_t . k_s * prod_{s<i<=t} sign_i for every s <= t, with or without a carried-in sign."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 9, 3, 4, dtype=torch.float64), torch.randn(2, 9, 3, 4, dtype=torch.float64)
    sign = torch.where(torch.rand(2, 9, 3) < 0.4, -1.0, 1.0).double()
    initial = torch.where(torch.rand(2, 3) < 0.5, -1.0, 1.0).double()
    qs, ks, last = apply_sign_prefix(q, k, sign, initial)
    scores = torch.einsum("bthd,bshd->bhts", qs, ks)
    for t in range(9):
        for s in range(t + 1):
            expected = torch.einsum("bhd,bhd->bh", q[:, t], k[:, s]) * sign[:, s + 1 : t + 1].prod(1)
            torch.testing.assert_close(scores[:, :, t, s], expected)
    torch.testing.assert_close(last, initial * sign.prod(1))


@pytest.mark.parametrize("mixer", ["gated_deltanet", "log_linear_gated_deltanet", "linear_attention", "retnet"])
def test_the_cpu_chunk_follows_the_keys_for_the_delta_rule_and_the_wider_head_otherwise(tiny, mixer, monkeypatch):
    seen, run = [], linear_mixer.run_impl_mappable

    def recording(*args, chunk_size, **kwargs):
        seen.append(chunk_size)
        return run(*args, chunk_size=chunk_size, **kwargs)

    monkeypatch.setattr(linear_mixer, "run_impl_mappable", recording)
    model = build_model(tiny(mixer=mixer, chunk_size=256, expand=2))
    layer = model.blocks[0].mixer
    assert layer.value_dim == 2 * layer.key_dim == 32  # value heads wider than the keys and than 16
    _train_step(model, T=60)
    delta = mixer.endswith("gated_deltanet")
    assert seen == [16 if delta else 32] * len(model.blocks)

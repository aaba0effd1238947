"""The per-head fraction of negative-eigenvalue transitions, against the decay and beta formulas."""

import math

import pytest
import torch
import torch.nn.functional as F

from loglinear.models import MIXERS, ModelConfig
from loglinear.models.decay_init import DT_MIN, initial_dt_bias
from loglinear.models.layers import inverse_softplus


def _mixer(tiny, mixer: str, negative_eigenvalues: bool = True):
    torch.manual_seed(0)
    cfg = tiny(mixer=mixer, d_model=32, negative_eigenvalues=negative_eigenvalues)
    return MIXERS[mixer](cfg).double()


def _counted_fractions(mixer, x):
    mixer.count_transitions(True)
    with torch.no_grad():
        mixer(x)
    return mixer.transition_counts.fractions()


def test_mamba2_counts_the_tokens_whose_signed_decay_is_negative(tiny):
    mixer = _mixer(tiny, "mamba2")
    with torch.no_grad():  # heads from always positive to mostly negative decays
        mixer.dt_bias.copy_(inverse_softplus(torch.tensor([0.01, 0.1, 0.25, 1.0], dtype=torch.float64)))
        mixer.A_log.fill_(math.log(4.0))
    x = torch.randn(3, 40, 32, dtype=torch.float64) * 20  # a large input spreads dt over tokens
    fractions = _counted_fractions(mixer, x)
    _, rest = mixer._project(x)
    dt = F.softplus(rest[1] + mixer.dt_bias)
    alpha = 2 * torch.exp(-torch.exp(mixer.A_log) * dt) - 1
    expected = (alpha < 0).double().mean((0, 1)).tolist()
    assert fractions == pytest.approx(expected, abs=1e-12)
    assert expected[0] < 0.5 < expected[-1] and 0 < expected[2] < 1


def test_gated_deltanet_counts_the_tokens_with_beta_above_one(tiny):
    mixer = _mixer(tiny, "gated_deltanet")
    x = torch.randn(3, 40, 32, dtype=torch.float64)
    fractions = _counted_fractions(mixer, x)
    _, rest = mixer._project(x)
    beta = 2 * torch.sigmoid(rest[1])
    expected = (beta > 1).double().mean((0, 1)).tolist()
    assert fractions == pytest.approx(expected, abs=1e-12)
    assert all(0 < f < 1 for f in expected)


@pytest.mark.parametrize("mixer", ["mamba2", "gated_deltanet", "log_linear_mamba2"])
def test_transitions_in_zero_one_are_never_negative(tiny, mixer):
    fractions = _counted_fractions(_mixer(tiny, mixer, negative_eigenvalues=False), torch.randn(2, 16, 32).double())
    assert fractions in ([], [0.0] * len(fractions))


def test_counting_stops_when_switched_off(tiny):
    mixer = _mixer(tiny, "mamba2")
    mixer.count_transitions(True)
    mixer.count_transitions(False)
    mixer(torch.randn(1, 8, 32).double())
    assert mixer.transition_counts is None


@pytest.mark.parametrize("dt_max", [0.1, 1.0])
def test_initial_dt_is_log_uniform_up_to_dt_init_max(dt_max):
    torch.manual_seed(0)
    dt = F.softplus(initial_dt_bias(20000, dt_max))
    assert DT_MIN * 0.999 < dt.min() and dt.max() < dt_max * 1.001
    assert dt.log().mean().item() == pytest.approx((math.log(DT_MIN) + math.log(dt_max)) / 2, abs=0.02)


def test_dt_init_max_must_exceed_the_smallest_dt():
    with pytest.raises(ValueError, match="dt_init_max"):
        ModelConfig(mixer="mamba2", dt_init_max=DT_MIN)

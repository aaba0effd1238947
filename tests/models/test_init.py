"""Seeded initialisation: paired models share every common parameter; the seed, not the global RNG, decides;
the initial distributions follow the documented rules."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from loglinear.models import MIXERS, build_model
from loglinear.models.config import ModelConfig
from loglinear.models.decay_init import A_RANGE, DT_MIN
from loglinear.models.init import INIT_STD, init_from_seed

from .helpers import BASE_OF, LOG_LINEAR

DT_RANGE = (DT_MIN, ModelConfig.dt_init_max)

RICH = dict(mlp_ratio=2.0, tie_embeddings=False)  # every kind of module: MLP and a separate LM head too
FIXED = ("norm.weight", ".D", ".param.scale")
"""Parameters whose rule draws nothing (norms, Mamba-2's D and the lambda scale start at a constant)."""


def parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters())


@pytest.mark.parametrize("mixer", LOG_LINEAR)
def test_every_common_parameter_starts_equal_to_the_base(tiny, mixer):
    """Default lambda head: every parameter of the base model is in the log-linear model, bitwise equal;
    the log-linear model's other parameters are its lambda heads'."""
    base = parameters(build_model(tiny(mixer=BASE_OF[mixer], **RICH), seed=11))
    loglin = parameters(build_model(tiny(mixer=mixer, **RICH), seed=11))
    for name, value in base.items():
        assert torch.equal(loglin.pop(name), value), name
    assert loglin and all(".mixer.lambda_head." in name for name in loglin)


@pytest.mark.parametrize("mixer", MIXERS.names())
def test_seeds_decide_and_the_global_rng_does_not(tiny, mixer):
    torch.manual_seed(0)
    first = parameters(build_model(tiny(mixer=mixer, **RICH), seed=3))
    torch.manual_seed(1)
    again = parameters(build_model(tiny(mixer=mixer, **RICH), seed=3))
    other = parameters(build_model(tiny(mixer=mixer, **RICH), seed=4))
    for name, value in first.items():
        assert torch.equal(again[name], value), name
        fixed = name.endswith(FIXED)
        assert torch.equal(other[name], value) == fixed, name


def test_without_a_seed_the_global_rng_decides(tiny):
    torch.manual_seed(5)
    first = build_model(tiny(mixer="mamba2")).embedding.weight
    torch.manual_seed(5)
    assert torch.equal(build_model(tiny(mixer="mamba2")).embedding.weight, first)
    assert not torch.equal(build_model(tiny(mixer="mamba2")).embedding.weight, first)


def test_initial_distributions():
    """The rules: N(0, 0.02^2) weights, convolution U(+-1/sqrt(k)), A = exp(A_log) in A_RANGE,
    dt = softplus(dt_bias) log-uniform in DT_RANGE, norms and D at 1, the paper's lambda scale 1."""
    model = build_model(dict(mixer="log_linear_mamba2", d_model=128, n_layers=1, vocab_size=512, max_len=64), seed=0)
    mixer = model.blocks[0].mixer
    for weight in (model.embedding.weight, mixer.in_proj.weight, mixer.out_proj.weight, mixer.lambda_head.proj.weight):
        assert abs(weight.mean().item()) < 2e-3 and abs(weight.std().item() / INIT_STD - 1) < 0.05
    bound = mixer.conv.kernel_size**-0.5
    for p in (mixer.conv.weight, mixer.conv.bias):
        assert p.abs().max() <= bound and p.abs().max() > 0.9 * bound
    A, dt = mixer.A_log.exp(), F.softplus(mixer.dt_bias)
    assert A.min() >= A_RANGE[0] and A.max() <= A_RANGE[1]
    assert dt.min() >= DT_RANGE[0] * (1 - 1e-5) and dt.max() <= DT_RANGE[1] * (1 + 1e-5)
    spread = dt.log().std().item() / ((math.log(DT_RANGE[1]) - math.log(DT_RANGE[0])) / math.sqrt(12))
    assert 0.7 < spread < 1.3  # log-uniform, not all at one value
    for p in (mixer.D, mixer.norm.weight, model.norm.weight, mixer.lambda_head.param.scale):
        assert (p == 1).all()


def test_a_module_without_a_rule_is_refused():
    class Unruled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(3))

    model = nn.Sequential(nn.Linear(2, 2), Unruled())
    with pytest.raises(TypeError, match=r"1 \(Unruled\) has parameters but no init_parameters"):
        init_from_seed(model, 0)

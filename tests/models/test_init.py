"""Seeded initialisation: paired models share every common parameter; the seed, not the global RNG, decides;
the initial distributions follow the documented rules."""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from loglinear.models import MIXERS, build_model
from loglinear.models.config import ModelConfig
from loglinear.models.decay_init import A_RANGE, DT_MIN
from loglinear.models.init import INIT_STD, init_from_seed, module_generator
from loglinear.models.mixers import check_model

from .helpers import BASE_OF, LOG_LINEAR

DT_RANGE = (DT_MIN, ModelConfig.dt_init_max)

RICH = dict(mlp_ratio=2.0, tie_embeddings=False)  # every kind of module: MLP and a separate LM head too
FIXED = ("norm.weight", ".D", ".param.scale", "layer1.bias", "layer2.bias")
"""Parameters whose rule draws nothing (norms, Mamba-2's D, the lambda scale and linear attention's feature-map
biases start at a constant)."""


def parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters())


MAMBA2_INIT = dict(A_init="arange", in_proj_std=0.1, out_proj_init="fan_in_uniform", conv_bias_init="zero")
"""Every Mamba-2 init option away from its default (Hugging Face transformers' rules)."""


@pytest.mark.parametrize("options", [{}, MAMBA2_INIT], ids=["default", "mamba2_init_options"])
@pytest.mark.parametrize("mixer", LOG_LINEAR)
def test_every_common_parameter_starts_equal_to_the_base(tiny, mixer, options):
    """Default lambda head: every parameter of the base model is in the log-linear model, bitwise equal;
    the log-linear model's other parameters are its lambda heads'."""
    base = parameters(build_model(tiny(mixer=BASE_OF[mixer], **RICH, **options), seed=11))
    loglin = parameters(build_model(tiny(mixer=mixer, **RICH, **options), seed=11))
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


@pytest.mark.parametrize("mixer", ["mamba2", "log_linear_mamba2"])
def test_the_mamba2_init_options(mixer):
    """A = 1..H exactly; in_proj N(0, 0.1^2); out_proj U(+-1/sqrt(d_inner)); conv bias 0 (its weight unchanged);
    a uniform range of one's own; and at the defaults the exact draws of before (uniform A, 0.02, conv bias)."""
    common = dict(mixer=mixer, d_model=128, n_layers=1, vocab_size=512, max_len=64)
    default = build_model(common, seed=0).blocks[0].mixer
    mixer_ = build_model({**common, **MAMBA2_INIT}, seed=0).blocks[0].mixer
    assert torch.equal(mixer_.A_log, torch.arange(1.0, mixer_.n_heads + 1).log())
    assert abs(mixer_.in_proj.weight.std().item() / 0.1 - 1) < 0.05
    bound = mixer_.out_proj.in_features**-0.5
    weight = mixer_.out_proj.weight
    assert weight.abs().max() <= bound and weight.abs().max() > 0.99 * bound
    assert abs(weight.std().item() / (bound / math.sqrt(3)) - 1) < 0.05
    assert not mixer_.conv.bias.any() and torch.equal(mixer_.conv.weight, default.conv.weight)
    assert torch.equal(mixer_.dt_bias, default.dt_bias)
    assert torch.allclose(mixer_.in_proj.weight / 5, default.in_proj.weight, rtol=1e-6, atol=0)  # the same draw
    ranged = build_model({**common, "A_init_min": 0.5, "A_init_max": 0.5}, seed=0).blocks[0].mixer
    assert torch.allclose(ranged.A_log.exp(), torch.full((ranged.n_heads,), 0.5))


@pytest.mark.parametrize(
    ("option", "match"),
    [(dict(A_init="s4d"), r"A_init: unknown option 's4d'; valid: uniform, arange"),
     (dict(out_proj_init="xavier"), r"out_proj_init: unknown option 'xavier'; valid: normal, fan_in_uniform"),
     (dict(conv_bias_init="one"), r"conv_bias_init: unknown option 'one'; valid: uniform, zero"),
     (dict(A_init_min=4.0, A_init_max=2.0), r"A_init_min=4.0 must be <= A_init_max=2.0"),
     (dict(A_init_min=0.0), r"A_init_min"), (dict(in_proj_std=-0.1), r"in_proj_std")],
)
def test_bad_mamba2_init_options_are_refused(option, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(mixer="mamba2", **option)


def test_a_module_without_a_rule_is_refused():
    class Unruled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(3))

    model = nn.Sequential(nn.Linear(2, 2), Unruled())
    with pytest.raises(TypeError, match=r"1 \(Unruled\) has parameters but no init_parameters"):
        init_from_seed(model, 0)


@pytest.mark.parametrize("mixer", ["gated_deltanet", "mamba2"])
def test_the_default_start_is_the_plain_draw_of_each_module(mixer):
    """At init=default the output projection and the convolution draw as before the authors' option existed: a
    plain nn.Linear's N(0, 0.02^2) (Gated DeltaNet) and nn.Conv1d's U(+-1/sqrt(k)), from their own generators."""
    model = build_model(dict(mixer=mixer, d_model=32, n_layers=1, vocab_size=64, max_len=64), seed=7)
    mixer_ = model.blocks[0].mixer
    conv = mixer_.conv.weight
    bound = mixer_.conv.kernel_size**-0.5
    expected = torch.empty_like(conv).uniform_(-bound, bound, generator=module_generator(7, "blocks.0.mixer.conv"))
    assert torch.equal(conv, expected)
    if mixer == "gated_deltanet":
        out = mixer_.out_proj.weight
        draw = torch.empty_like(out).normal_(0.0, INIT_STD, generator=module_generator(7, "blocks.0.mixer.out_proj"))
        assert torch.equal(out, draw)


@pytest.mark.parametrize(
    ("option", "match"),
    [(dict(init="fla"), r"ModelConfig.init: unknown option 'fla'; valid: default, authors"),
     (dict(init="authors", A_init="arange"),
      r"ModelConfig.A_init='arange': init=authors fixes every initial value .* leave A_init at its default"),
     (dict(init="authors", dt_init_max=0.2), r"ModelConfig.dt_init_max=0.2: init=authors")],
)
def test_bad_init_settings_are_refused(option, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(mixer="mamba2", **option)


def test_a_mixer_without_an_authors_start_is_refused_under_init_authors(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    cfg = ModelConfig(mixer="causal_conv_mixer:CausalConvMixer", init="authors")
    with pytest.raises(ValueError, match=r"ModelConfig.init=authors: mixer 'causal_conv_mixer:CausalConvMixer' has "
                                         r"no authors' initialisation .*; mixers with one: attention, mamba2, "):
        check_model(cfg)
    check_model(ModelConfig(mixer="causal_conv_mixer:CausalConvMixer"))


@pytest.mark.parametrize("mixer", [m for m in LOG_LINEAR if MIXERS[m].authors_init is not None])
def test_under_init_authors_a_log_linear_mixer_and_its_base_start_apart_only_where_the_authors_do(tiny, mixer):
    """Their common parameters are equal but for A (log-linear Mamba-2: 1..H, not drawn) and the output projection,
    the same draw at another scale (Mamba-2: 1/sqrt(n_layers) against 1/sqrt(2 n_layers); Gated DeltaNet:
    N(0, 0.02^2) against the rescaled fan-in uniform)."""
    base = parameters(build_model(tiny(mixer=BASE_OF[mixer], init="authors"), seed=11))
    loglin = parameters(build_model(tiny(mixer=mixer, init="authors"), seed=11))
    apart = {name for name, value in base.items() if not torch.equal(loglin[name], value)}
    expected = {f"blocks.{i}.mixer.out_proj.weight" for i in range(2)}
    if mixer == "log_linear_mamba2":
        expected |= {f"blocks.{i}.mixer.A_log" for i in range(2)}
        for i in range(2):
            ratio = loglin[f"blocks.{i}.mixer.out_proj.weight"] / base[f"blocks.{i}.mixer.out_proj.weight"]
            assert torch.allclose(ratio, torch.full_like(ratio, 2**-0.5))
    assert apart == expected


@pytest.mark.parametrize("mixer", [m for m in LOG_LINEAR if MIXERS[m].authors_init is None])
def test_a_log_linear_mixer_without_authors_code_is_refused_under_init_authors(tiny, mixer):
    """Log-linear linear attention, RetNet and DeltaNet exist in no authors' code: no authors' start to claim."""
    assert MIXERS[BASE_OF[mixer]].authors_init is not None
    with pytest.raises(ValueError, match=rf"^ModelConfig.init=authors: mixer '{mixer}' has no authors' initialisation"):
        check_model(tiny(mixer=mixer, init="authors"))

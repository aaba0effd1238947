"""ModelConfig: defaults build every mixer from d_model 16 to 512; impossible settings name their field; the fields
one mixer reads are declared with it."""

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from loglinear.models import LAMBDA_PARAMS, MIXERS, ModelConfig, build_model
from loglinear.models.mixer_fields import (
    AttentionFields,
    GatedDeltaNetFields,
    LinearAttentionFields,
    LogLinearFields,
    Mamba2Fields,
    RetNetFields,
)
from loglinear.models.mixers import check_model

MODELS = Path(__file__).resolve().parents[2] / "src" / "loglinear" / "models"
READERS = {AttentionFields: {"attention.py"}, Mamba2Fields: {"mamba2.py"},
           GatedDeltaNetFields: {"gated_deltanet.py", "deltanet.py"}, LinearAttentionFields: {"linear_attention.py"},
           RetNetFields: {"retnet.py"}, LogLinearFields: {"log_linear.py", "lambda_params.py"}}
"""The modules of the mixer each group of fields is declared with."""


@pytest.mark.parametrize("group", READERS, ids=lambda group: group.__name__)
def test_a_mixers_own_fields_are_read_by_its_modules_only(group):
    for f in dataclasses.fields(group):
        reading = {p.name for p in MODELS.glob("*.py") if re.search(rf"\bcfg\.{f.name}\b", p.read_text())}
        assert reading and reading <= READERS[group], (f.name, reading)
        assert f.name in {g.name for g in dataclasses.fields(ModelConfig)}


BAD_OWN_FIELD = {AttentionFields: dict(rope_base=0.0), Mamba2Fields: dict(A_init_min=4.0, A_init_max=2.0),
                 GatedDeltaNetFields: dict(deltanet_key_dim=0), LinearAttentionFields: dict(linear_attention_heads=0),
                 RetNetFields: dict(retnet_heads=0), LogLinearFields: dict(lambda_bias_init="big")}


@pytest.mark.parametrize("group", READERS, ids=lambda group: group.__name__)
def test_each_group_checks_its_own_fields(group, monkeypatch):
    """A group's impossible value is refused by the group (`check_own`), naming its field."""
    bad = BAD_OWN_FIELD[group]
    with pytest.raises(ValueError, match=rf"ModelConfig\.{next(iter(bad))}"):
        ModelConfig(**bad)
    monkeypatch.setattr(group, "check_own", lambda self: None)
    ModelConfig(**bad)


def test_registries_hold_the_contract_names():
    assert set(MIXERS.names()) >= {
        "attention", "mamba2", "gated_deltanet", "log_linear_mamba2", "log_linear_gated_deltanet",
    }
    assert LAMBDA_PARAMS.names() == ["softplus", "bounded", "sigmoid", "softmax", "static", "constant", "mlp"]


def test_registry_miss_lists_valid_names():
    with pytest.raises(ValueError, match="unknown mixer 'mamba3'.*attention.*log_linear_gated_deltanet"):
        MIXERS["mamba3"]


@pytest.mark.parametrize("d_model", [16, 32, 64, 128, 256, 512])
@pytest.mark.parametrize("mixer", MIXERS.names())
def test_defaults_build_and_run(mixer, d_model):
    model = build_model(ModelConfig(mixer=mixer, d_model=d_model, vocab_size=64))
    logits = model(torch.randint(0, 64, (1, 5)))
    assert logits.shape == (1, 5, 64) and torch.isfinite(logits).all()


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(mixer="mamba3"), r"ModelConfig.mixer: unknown mixer 'mamba3'; valid: attention"),
        (dict(lambda_param="relu"), r"ModelConfig.lambda_param: .*'relu'; valid: softplus, bounded"),
        (dict(lambda_bias_init="big"), r"ModelConfig.lambda_bias_init"),
        (dict(mixer="attention", d_model=64, attention_heads=3),
         r"ModelConfig.d_model=64 is not divisible by attention_heads=3"),
        (dict(mixer="gated_deltanet", d_model=64, deltanet_heads=5),
         r"ModelConfig.d_model=64 is not divisible by deltanet_heads=5"),
        (dict(mixer="attention", d_model=48, attention_heads=16),
         r"ModelConfig.attention_heads=16 .* odd head dim 3"),
        (dict(mixer="retnet", d_model=48, retnet_heads=16),
         r"ModelConfig.retnet_heads=16 gives an odd head dim 3; RetNet's rotary embedding needs it even"),
        (dict(mixer="linear_attention", d_model=64, linear_attention_heads=5),
         r"ModelConfig.d_model=64 is not divisible by linear_attention_heads=5"),
        (dict(mixer="mamba2", d_model=24, head_dim=32), r"ModelConfig.head_dim=32 must divide expand \* d_model = 48"),
        (dict(d_model=0), r"ModelConfig.d_model must be >= 1, got 0"),
        (dict(attention_heads=0), r"ModelConfig.attention_heads must be >= 1, got 0"),
        (dict(deltanet_heads=-1), r"ModelConfig.deltanet_heads must be >= 1, got -1"),
        (dict(vocab_size=1), r"ModelConfig.vocab_size"),
        (dict(impl="cuda"), r"ModelConfig.impl: unknown impl 'cuda'; valid: auto, naive"),
        (dict(chunk_size=48), r"ModelConfig.chunk_size must be a power of two"),
        (dict(selfcheck="never"), r"ModelConfig.selfcheck: unknown mode 'never'; valid: auto, force, skip"),
        (dict(lambda_share_from_level=0), r"ModelConfig.lambda_share_from_level"),
        (dict(mlp_ratio=-1.0), r"ModelConfig.mlp_ratio"),
    ],
)
def test_impossible_configs_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        check_model(ModelConfig(**fields))


def test_build_model_accepts_mappings_and_rejects_unknown_keys():
    assert build_model({"mixer": "mamba2", "d_model": 16, "vocab_size": 8}).cfg.mixer == "mamba2"
    with pytest.raises(ValueError, match="no field.*d_modle"):
        build_model({"d_modle": 16})


def test_omegaconf_structured_config_round_trip():
    overrides = OmegaConf.from_dotlist(["mixer=log_linear_mamba2", "d_model=32"])
    cfg = OmegaConf.merge(OmegaConf.structured(ModelConfig), overrides)
    model = build_model(cfg)
    assert model.cfg == ModelConfig(mixer="log_linear_mamba2", d_model=32)
    with pytest.raises(ValueError, match="ModelConfig.mixer"):
        build_model(OmegaConf.merge(cfg, {"mixer": "nope"}))


def test_default_heads():
    def heads(mixer: str, d: int) -> int:
        return MIXERS[mixer].num_heads(ModelConfig(mixer=mixer, d_model=d))

    assert [heads("gated_deltanet", d) for d in (16, 32, 64, 256, 512)] == [1, 2, 2, 2, 4]
    assert [heads("attention", d) for d in (16, 64, 128, 512)] == [1, 1, 2, 8]
    assert heads("mamba2", 64) == 8  # expand 2, head dim 16


def test_mixers_describe_themselves():
    assert MIXERS.names() == [
        "attention", "mamba2", "gated_deltanet", "linear_attention", "retnet", "deltanet", "log_linear_mamba2",
        "log_linear_gated_deltanet", "log_linear_linear_attention", "log_linear_retnet", "log_linear_deltanet",
    ]
    assert [m.display_name for _, m in MIXERS.items()] == [
        "Transformer", "Mamba-2", "Gated DeltaNet", "Linear Attention", "RetNet", "DeltaNet", "Log-Linear Mamba-2",
        "Log-Linear Gated DeltaNet", "Log-Linear Linear Attention", "Log-Linear RetNet", "Log-Linear DeltaNet",
    ]
    for name, mixer in MIXERS.items():
        assert mixer.name == name
        assert mixer.log_linear == (mixer.base is not None)
        if mixer.log_linear:
            assert issubclass(mixer, MIXERS[mixer.base])


@pytest.mark.parametrize("name", MIXERS.names())
def test_negative_eigenvalues_change_exactly_the_mixers_with_transitions(tiny, name):
    tokens = torch.randint(0, 32, (2, 24), generator=torch.Generator().manual_seed(0))
    logits = []
    for negative in (False, True):
        torch.manual_seed(0)
        model = build_model(tiny(mixer=name, negative_eigenvalues=negative)).double()
        logits.append(model(tokens))
    assert torch.equal(logits[0], logits[1]) != MIXERS[name].transitions

"""`MIXERS`: every sequence mixer by its `name`: the base mixers, then the log-linear ones.

Benchmarks and tests list mixers in this order; report tables put each base mixer's log-linear
variants right after it (the paper's rows). All of them read what each mixer says about itself
(display name, base mixer, log-linear, heads: see `Mixer`). A mixer of the suite is one module with its
`Mixer` subclass plus one entry here; a user's own mixer is one file anywhere, named by its import path
(`model.mixer=mypackage.layers:MyMixer`, docs/adding-a-mixer.md).
"""

from __future__ import annotations

from loglinear.kernels.selfcheck import mode_of
from loglinear.models.attention import Attention
from loglinear.models.config import ModelConfig
from loglinear.models.deltanet import DeltaNet
from loglinear.models.gated_deltanet import GatedDeltaNet
from loglinear.models.lambda_params import LAMBDA_PARAMS
from loglinear.models.linear_attention import LinearAttention
from loglinear.models.log_linear import (
    LogLinearDeltaNet,
    LogLinearGatedDeltaNet,
    LogLinearLinearAttention,
    LogLinearMamba2,
    LogLinearRetNet,
)
from loglinear.models.mamba2 import Mamba2
from loglinear.models.mixer import Mixer
from loglinear.models.output_check import check_output
from loglinear.models.retnet import RetNet
from loglinear.registry import Registry

MIXERS: Registry[type[Mixer]] = Registry(
    "mixer", ((m.name, m) for m in (
        Attention, Mamba2, GatedDeltaNet, LinearAttention, RetNet, DeltaNet,
        LogLinearMamba2, LogLinearGatedDeltaNet, LogLinearLinearAttention, LogLinearRetNet, LogLinearDeltaNet,
    )),
    base=Mixer,
)


def check_model(cfg: ModelConfig) -> ModelConfig:
    """`cfg` itself, once what its fields need of the registries holds: a known mixer (a name or an import
    path) and lambda parameterisation, an authors' initialisation of the mixer under `init=authors`, the
    mixer's own options (`Mixer.read_options`), every setting the mixer checks (`Mixer.check_config`), the
    output of a mixer class outside the suite (`check_output`) and the self-check mode (LOGLINEAR_SELFCHECK
    when `selfcheck` is null); else a ValueError naming the field. (`ModelConfig` checks its own fields when
    built, without the registries.)"""
    for field, registry in (("mixer", MIXERS), ("lambda_param", LAMBDA_PARAMS)):
        try:
            registry[getattr(cfg, field)]
        except ValueError as e:
            raise ValueError(f"ModelConfig.{field}: {e}") from None
    mixer = MIXERS[cfg.mixer]
    if cfg.init == "authors" and mixer.authors_init is None:
        with_rules = ", ".join(name for name, m in MIXERS.items() if m.authors_init is not None)
        raise ValueError(f"ModelConfig.init=authors: mixer {cfg.mixer!r} has no authors' initialisation "
                         f"(`Mixer.authors_init`); mixers with one: {with_rules}; or use init=default")
    mixer.read_options(cfg)
    mixer.check_config(cfg)
    if all(mixer is not suite for _, suite in MIXERS.items()):  # a user's class: run once on a tiny batch
        check_output(mixer, cfg)
    # LOGLINEAR_SELFCHECK, when the config leaves the mode to it: a bad value is refused now, not on a GPU later
    mode_of(cfg.selfcheck)
    return cfg

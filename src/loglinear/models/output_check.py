"""A mixer from outside the suite (named by its import path) runs once on a tiny batch before it is used: its
output must have the input's shape and dtype, be finite, and be causal (changing later tokens of one sequence moves
no earlier output of it, nor anything of the other sequence). The suite's own mixers have their tests instead."""

from __future__ import annotations

import torch
from torch import Tensor

from loglinear.models.config import ModelConfig
from loglinear.models.mixer import Mixer

BATCH, LENGTH, LATER = 2, 8, 5
"""The probe: 2 sequences of 8 tokens, the first one changed from token 5 on."""


def check_output(mixer_class: type[Mixer], cfg: ModelConfig) -> None:
    """A ValueError naming the mixer and what is wrong with its output. It builds its own instance and draws its
    inputs from its own generator, inside `fork_rng`: a run's random stream is the same with or without it."""
    where = f"ModelConfig.mixer {cfg.mixer!r}"
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        mixer = mixer_class(cfg)
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(BATCH, LENGTH, cfg.d_model, generator=generator)
        later = x.clone()
        later[0, LATER:] += torch.randn(LENGTH - LATER, cfg.d_model, generator=generator)
        y, moved = (_forward(mixer, inputs, where) for inputs in (x, later))
    if not torch.isfinite(y).all():
        raise ValueError(f"{where}: its output on a random (B, T, d_model) = {tuple(x.shape)} input is not finite")
    if not torch.allclose(moved[0, :LATER], y[0, :LATER], rtol=1e-4, atol=1e-6):
        raise ValueError(f"{where} is not causal: changing tokens {LATER}.. of a sequence moved its output at "
                         f"earlier positions (a mixer may read only the tokens up to each position)")
    if not torch.allclose(moved[1:], y[1:], rtol=1e-4, atol=1e-6):
        raise ValueError(f"{where} mixes the sequences of a batch: changing one moved the output of another")


def _forward(mixer: Mixer, x: Tensor, where: str) -> Tensor:
    try:
        y = mixer(x)
    except NotImplementedError:
        raise ValueError(f"{where} has no forward(x): a Mixer maps (B, T, d_model) to (B, T, d_model)") from None
    except Exception as e:
        reason = (str(e).splitlines() or [""])[0]
        raise ValueError(f"{where}: its forward fails on a (B, T, d_model) = {tuple(x.shape)} float32 input "
                         f"({type(e).__name__}: {reason})") from None
    if not isinstance(y, Tensor) or y.shape != x.shape or y.dtype != x.dtype:
        got = f"{y.dtype} {tuple(y.shape)}" if isinstance(y, Tensor) else type(y).__name__
        raise ValueError(f"{where}: its forward returns {got} for a {x.dtype} {tuple(x.shape)} input; a Mixer "
                         f"returns the input's shape (B, T, d_model) and dtype")
    return y

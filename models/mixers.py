"""`MIXERS`: every sequence mixer by its `name`, in the paper's table order.

Reports, benchmarks and tests list mixers in this order and read what each says about itself
(display name, base mixer, log-linear, heads: see `Mixer`). A new mixer is one module with its
`Mixer` subclass plus one entry here (docs/adding-a-mixer.md).
"""

from __future__ import annotations

from loglinear.models.attention import Attention
from loglinear.models.gated_deltanet import GatedDeltaNet
from loglinear.models.log_linear import LogLinearGatedDeltaNet, LogLinearMamba2
from loglinear.models.mamba2 import Mamba2
from loglinear.models.mixer import Mixer
from loglinear.registry import Registry

MIXERS: Registry[type[Mixer]] = Registry(
    "mixer", ((m.name, m) for m in (Attention, Mamba2, LogLinearMamba2, GatedDeltaNet, LogLinearGatedDeltaNet))
)

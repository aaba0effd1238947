"""Seeded initialisation: each module's parameters come from a generator of its own, keyed by (seed, module name).

Two models built with the same seed start with bitwise-equal parameters wherever they have a module of the
same qualified name and shape, whatever else they contain. A log-linear mixer differs from its base only by
its `lambda_head` modules, so at the same seed the embedding, norms, projections, convolution, A_log,
dt_bias, D and LM head of the two start equal: the paired comparisons compare architectures, not draws.
The global RNG plays no part.

Rules: a module with `init_parameters(generator)` applies its own (for most, the rule its constructor applies
with torch's global generator, so a module built on its own is initialised too; layers.InitLinear, a linear
layer with a rule of its own, keeps nn.Linear's constructor); other nn.Linear and nn.Embedding weights are
N(0, INIT_STD^2) (biases zero).
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

INIT_STD = 0.02
"""Linear and embedding weights start as N(0, INIT_STD^2) (GPT-2 / zoology convention)."""
INITS = ("default", "authors")
"""`ModelConfig.init`: "default", the suite's rules (with the Mamba-2 init options); "authors", every mixer as
flash-linear-attention 0.6.0's model of it starts (docs/runs.md, "The authors' initialisation"). The rules are
the mixers' own (`Mixer.authors_init`)."""


def module_generator(seed: int, name: str) -> torch.Generator:
    """A CPU generator seeded from (seed, name) by a hash, independent of any other module's."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def init_from_seed(model: nn.Module, seed: int) -> None:
    """Initialise every parameter of `model`, each module from `module_generator(seed, its qualified name)`.

    Call it before tying weights (a tied module would be drawn again under its own name).
    A module with parameters and no rule is a TypeError, so no parameter keeps a global-RNG draw.
    """
    with torch.no_grad():
        for name, module in model.named_modules():
            if next(module.parameters(recurse=False), None) is None:
                continue
            generator = module_generator(seed, name)
            if hasattr(module, "init_parameters"):
                module.init_parameters(generator)
            elif isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, INIT_STD, generator=generator)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    module.bias.zero_()
            else:
                kind = type(module).__name__
                raise TypeError(f"{name or 'the model'} ({kind}) has parameters but no init_parameters")

"""`Variant`: the transition every token applies to the state, chosen once at the operator's entry
(`beta` None or given) and passed down to the implementations."""

from __future__ import annotations

import enum

from torch import Tensor


class Variant(enum.Enum):
    SCALAR_DECAY = "scalar decay"  # log-linear Mamba-2: W_t = alpha_t I (beta None)
    DELTA_RULE = "delta rule"  # log-linear Gated DeltaNet: W_t = alpha_t (I - beta_t k_t k_t^T)

    @classmethod
    def of(cls, beta: Tensor | None) -> Variant:
        return cls.SCALAR_DECAY if beta is None else cls.DELTA_RULE

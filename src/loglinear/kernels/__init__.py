"""Functional ops of log-linear attention (no nn.Module, no Lightning).

`log_linear_attn` is the parallel operator (implementations "naive", "recurrent", "chunk", "auto"),
`log_linear_attn_step` the O(log T)-memory decoding step, `LogLinearState` their state.
"""

from loglinear.kernels.api import IMPLS, log_linear_attn, log_linear_attn_step
from loglinear.kernels.checks import value_checks
from loglinear.kernels.fenwick import fenwick_level, level_matrix, num_levels, occupied_levels
from loglinear.kernels.state import LogLinearState

__all__ = [
    "IMPLS",
    "LogLinearState",
    "fenwick_level",
    "level_matrix",
    "log_linear_attn",
    "log_linear_attn_step",
    "num_levels",
    "occupied_levels",
    "value_checks",
]

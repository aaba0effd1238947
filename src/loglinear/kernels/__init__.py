"""Functional ops of log-linear attention (no nn.Module, no Lightning).

`log_linear_attn` is the parallel operator (implementations "naive", "recurrent", "chunk", "triton", "auto"),
`log_linear_attn_step` the O(log T)-memory decoding step, `LogLinearState` their state. `resolve_impl` names
the implementation a call would run (after the fused kernels' self-check, kernels/selfcheck.py) and
`run_impl` runs the operator on a named one.
"""

from loglinear.kernels.api import IMPLS, Choice, log_linear_attn, log_linear_attn_step, resolve_impl
from loglinear.kernels.checks import value_checks
from loglinear.kernels.fenwick import fenwick_level, level_matrix, num_levels, occupied_levels
from loglinear.kernels.impls import run_impl
from loglinear.kernels.state import LogLinearState

__all__ = [
    "IMPLS",
    "Choice",
    "LogLinearState",
    "fenwick_level",
    "level_matrix",
    "log_linear_attn",
    "log_linear_attn_step",
    "num_levels",
    "occupied_levels",
    "resolve_impl",
    "run_impl",
    "value_checks",
]

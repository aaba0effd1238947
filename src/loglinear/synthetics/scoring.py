"""Which positions a running-state task scores: `every` prefix, or the `last` position only.

With `every`, one sequence of length T teaches (and tests) every length 1..T; with `last`, a test set
at length L measures the answer at length L exactly (Deletang et al. 2023's protocol).
"""

from __future__ import annotations

from torch import Tensor

from loglinear.synthetics.batch import IGNORE_INDEX

SCORED = ("every", "last")


def check_scored(scored: object) -> str:
    if scored not in SCORED:
        raise ValueError(f"scored must be one of {list(SCORED)}, got {scored!r}")
    return scored


def keep_scored(targets: Tensor, scored: str) -> Tensor:
    """`targets (B, T)` with every position that `scored` leaves out set to IGNORE_INDEX (in place)."""
    if scored == "last":
        targets[:, :-1] = IGNORE_INDEX
    return targets

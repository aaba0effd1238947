"""The integer and number checks shared by configs, task arguments and command-line options: each error
names the argument, the bound it breaks and the value."""

from __future__ import annotations

import argparse
import math
import operator
from collections.abc import Callable


def check_int(name: str, value: object, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as an int, or a ValueError naming `name` and the bound it breaks (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    broken = _broken_bound(value, minimum, maximum)
    if broken:
        raise ValueError(f"{name} {broken}")
    return value


def check_float(name: str, value: object, *, minimum: float | None = None, maximum: float | None = None,
                 above: float | None = None, below: float | None = None) -> float:
    """`value` as a finite float, or a ValueError naming `name` and the bound it breaks: `minimum` and
    `maximum` are inclusive, `above` and `below` exclusive (bools and NaN or infinite values are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    for bound, relation, holds in ((minimum, ">=", operator.ge), (maximum, "<=", operator.le),
                                   (above, ">", operator.gt), (below, "<", operator.lt)):
        if bound is not None and not holds(value, bound):
            raise ValueError(f"{name} must be {relation} {bound}, got {value}")
    return float(value)


def int_option(minimum: int) -> Callable[[str], int]:
    """An argparse `type` for an integer option >= minimum (argparse puts the option's name before the error)."""

    def parse(text: str) -> int:
        value = int(text)  # not an integer: argparse reports "invalid int value"
        broken = _broken_bound(value, minimum, None)
        if broken:
            raise argparse.ArgumentTypeError(broken)
        return value

    parse.__name__ = "int"
    return parse


def _broken_bound(value: int, minimum: int | None, maximum: int | None) -> str | None:
    if minimum is not None and value < minimum:
        return f"must be >= {minimum}, got {value}"
    if maximum is not None and value > maximum:
        return f"must be <= {maximum}, got {value}"
    return None

"""Argument checks shared by the tasks: each error names the argument, the bound and the value.

`check_int` and `check_float` are the package-wide checks (loglinear/checks.py), imported here for the tasks."""

from __future__ import annotations

from collections.abc import Sequence

from loglinear.checks import check_float, check_int

__all__ = ["check_answers", "check_bool", "check_even", "check_float", "check_int", "check_int_or_ints"]


def check_answers(count: int, what: str, fix: str) -> int:
    """`count` (the distinct answers the arguments leave) if at least two, else a ValueError saying that every target
    would be the same answer (chance 100%: a run would be "solved" by learning nothing), naming `what` left one and
    `fix`, the bound on the arguments."""
    if count < 2:
        raise ValueError(f"{what} leaves {count} possible answer: every target would be the same (chance 100%); "
                         f"{fix}")
    return count


def check_even(name: str, value: int) -> int:
    if value % 2:
        raise ValueError(f"{name} must be even, got {value}")
    return value


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def check_int_or_ints(name: str, value: object, *, minimum: int) -> tuple[int, ...]:
    """An int or a non-empty list of ints, each >= minimum, as a tuple (duplicates kept: they weight)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            raise ValueError(f"{name} must be an integer or a non-empty list of integers, got []")
        return tuple(check_int(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(value))
    return (check_int(name, value, minimum=minimum),)
